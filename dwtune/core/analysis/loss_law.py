"""The separable law fitted to a table's losses, not only to its transitions (pure: numpy).

``loss = A/dx + B/L + E`` is linear in (A, B, E), so ordinary least squares over every run's
loss at the compared checkpoint fits it exactly (failed runs and missing losses left out).
Its transitions follow from ``c = ln(A/B)`` alone (:mod:`dwtune.core.fit.competing`), so the
fit is held against the table's own bracketed N*: the rms error of ``ln N*`` its crossings make,
beside the same error of the ``ln dx* = a + b·L`` fit at those pairs. Where A or B is not
positive the law has no crossing and the error is NaN (the reason says so).

Why both numbers: a loss fit can be close in nats and still place the crossings badly (Δ is a
small difference of two losses), and the transitions are what the projections rest on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dwtune.core.analysis.table import RunTable
from dwtune.core.fit import FitResult, TransitionObservation
from dwtune.core.fit.competing import separable_log_width
from dwtune.core.vocabulary import TransitionStatus


@dataclass(frozen=True)
class SeparableLossFit:
    """``loss = A/dx + B/L + E`` by least squares over the runs, and its crossings' error."""

    a_width: float  # A, nats × width units
    b_depth: float  # B, nats × layers
    e_floor: float  # E, nats
    runs: int
    rms_residual: float  # nats
    c: float  # ln(A/B); NaN unless A and B are positive
    rms_ln_n_error: float  # its crossings against the table's bracketed N*
    levine_rms_ln_n_error: float  # the ln dx* = a + b·L fit's, same pairs
    pairs: int
    reason: str = ""  # why there is no crossing error ("" when there is)

    def to_dict(self) -> dict[str, object]:
        return {
            "model": "loss = A/width + B/depth + E (least squares over the runs)",
            "A": self.a_width,
            "B": self.b_depth,
            "E": self.e_floor,
            "runs": self.runs,
            "rms_residual": self.rms_residual,
            "c": self.c,
            "rms_ln_n_error": self.rms_ln_n_error,
            "levine2020_fit_rms_ln_n_error": self.levine_rms_ln_n_error,
            "pairs": self.pairs,
            "reason": self.reason,
        }


def _rms(values: np.ndarray) -> float:
    return float(np.sqrt(np.mean(values**2))) if values.size else math.nan


def _bracketed(observations: Sequence[TransitionObservation]) -> list[TransitionObservation]:
    return [o for o in observations if o.status == TransitionStatus.BRACKETED and o.fitted]


def fit_separable_losses(
    table: RunTable, observations: Sequence[TransitionObservation], fit: FitResult
) -> SeparableLossFit | None:
    """The loss fit over ``table``'s runs (None with fewer runs than 4: no residual left)."""
    ok = np.isfinite(table.loss) & ~table.is_failed()
    if int(ok.sum()) < 4:
        return None
    design = np.column_stack([1.0 / table.width[ok], 1.0 / table.depth[ok], np.ones(ok.sum())])
    (a_width, b_depth, e_floor), *_ = np.linalg.lstsq(design, table.loss[ok], rcond=None)
    residual = table.loss[ok] - design @ np.array([a_width, b_depth, e_floor])
    pairs = _bracketed(observations)
    shallow = np.array([o.depth_shallow for o in pairs], dtype=float)
    deep = np.array([o.depth_deep for o in pairs], dtype=float)
    log_n = np.array([o.log_n for o in pairs], dtype=float)
    levine = 2.0 * (fit.a + fit.b * deep) + np.log(12.0 * deep) - log_n
    c, error, reason = math.nan, math.nan, ""
    if a_width > 0 and b_depth > 0:
        c = math.log(a_width / b_depth)
        predicted = np.log(12.0 * deep) + 2.0 * (c + separable_log_width(shallow, deep))
        error = _rms(predicted - log_n)
    else:
        reason = "A or B is not positive: the fitted losses have no crossing"
    return SeparableLossFit(
        float(a_width), float(b_depth), float(e_floor), int(ok.sum()), _rms(residual), c,
        error, _rms(levine), len(pairs), reason,
    )  # fmt: skip
