"""Noise of a table of one run per shape, from each run's checkpoints (pure: numpy, scipy).

Why: a table with one run per shape has no seed-to-seed spread to measure, and judging every
point at an assumed sd (the 0.003 nats guess) is wrong by whatever the real noise is (a real
suite's checkpoint-to-checkpoint jitter ran from 0.0004 to 0.015 nats per model, median
0.0023). Its checkpoints still say how far one loss reading scatters about the run's own
smooth curve.

Per run (rows sharing a run key, :func:`dwtune.core.analysis.table.run_keys`): its
checkpoints up to the one compared (the last, or the one nearest ``--tokens``), ordered by
tokens (else steps). Over the last ``JITTER_SHARE`` of them (at least ``JITTER_MIN_POINTS``;
a run with fewer is not measured) the loss is fitted by a polynomial of degree
``JITTER_DEGREE`` (3) in ln tokens; the residual sum of squares ``ss_r`` on ``ν_r = k − 4``
degrees of freedom is the run's jitter (nats², one loss reading). A run whose residual sd is
below ``JITTER_FLOOR`` has a curve without jitter (a simulated one) and measures nothing.

Pooling, per depth. Why per depth: a pair's two nets are of two depths, and noise that grows
with depth is a known surface (:mod:`dwtune.backends.simulated`); why not per run: a run
gives 2-20 degrees of freedom, too few to judge a sign on its own. A run whose jitter is
beyond the 99.9% quantile of ``χ²_ν/ν`` times its depth's median-based scale (``median(s²_r)``
over the median of ``χ²_ν/ν``, so one run with a loss spike cannot set it) is *flagged*: it
keeps its own variance and dof (its readings are noisier; the points it enters are judged so),
and is left out of the pool. The others share their depth's pool ``Σ ss_r / Σ ν_r`` on
``Σ ν_r`` dof. A depth with no measured run uses the pool of every depth. Noise along size
within a depth is not modelled (the per-depth table in the output shows what was pooled).

A Δ point compares two independent runs, so its sd is ``sqrt(v_deep + v_shallow)`` (the
shallower loss is moved along a size trend by a factor within e^(±0.02) of 1 at the default
window, which this leaves out), on the Welch-Satterthwaite degrees of freedom
``(v_d + v_s)² / (v_d²/ν_d + v_s²/ν_s)``.

What it cannot show: checkpoint jitter is the evaluation and optimisation noise of one run
near its end, not seed-to-seed variation (data order, initialisation), which is usually
larger: a second seed of the same shape can end several jitters away. A sign decided on jitter
says the two runs' curves end apart by more than their readings scatter, not that a rerun
would order them the same. A smooth curve that is too stiff for the late loss drop of a
decaying schedule inflates the residuals (conservative); a curve logged so sparsely that the
fit has no dof measures nothing. Replicate runs, where a table has them, measure the noise
that matters directly and are preferred (:mod:`dwtune.core.analysis.verdicts`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from dwtune.core import vocabulary
from dwtune.core.analysis.table import (
    RunTable,
    checkpoint_order,
    pick_checkpoint,
    run_groups,
    run_name,
)
from dwtune.core.refine.noise import Noise

JITTER_SHARE = 0.5  # the later half of a run's checkpoints: the curve is smooth there
JITTER_MIN_POINTS = 6  # a cubic has 4 parameters: 6 checkpoints leave 2 dof
# Cubic in ln tokens. Why not a quadratic: on the simulated backend's exact (jitter-free)
# curve, the last 10 of 20 checkpoints leave a residual sd of 0.0020 nats about a quadratic,
# as large as the jitter to be measured, and 0.00002 about a cubic: a decaying schedule's late
# drop bends the curve more than a parabola in ln tokens can.
JITTER_DEGREE = 3
FLAG_QUANTILE = 0.999  # a run beyond this χ²_ν/ν quantile of its depth's scale is flagged
# nats: a residual sd below this is no jitter but a curve without any (the simulated backend's
# curves are exact; a float32 loss near 3 nats resolves 2.4e-7): such a run measures nothing
JITTER_FLOOR = 1e-6


@dataclass(frozen=True)
class RunJitter:
    """One run's residual sum of squares about its smooth curve (nats²) and its dof."""

    name: str
    depth: float
    params: float
    row: int  # the source row number of the checkpoint compared
    ss: float
    dof: int

    @property
    def variance(self) -> float:
        return self.ss / self.dof


@dataclass(frozen=True)
class DepthJitter:
    """A depth's pooled jitter: sd of one loss reading (nats), its dof, runs behind it."""

    depth: float
    sd: float
    dof: float
    runs: int  # measured runs in the pool
    flagged: tuple[RunJitter, ...]  # runs kept out of the pool, each with its own jitter


@dataclass(frozen=True)
class JitterModel:
    """Each used run's variance and dof (by source row), and the pools that gave them."""

    order: str  # tokens or step: what the curve was fitted in (ln of it)
    depths: tuple[DepthJitter, ...]
    overall: DepthJitter  # every depth's kept runs: for depths without a measured run
    # source row number of a used checkpoint -> (variance, dof)
    by_row: dict[int, tuple[float, float]]
    runs_measured: int
    runs_total: int

    def delta_noise(self, rows: Sequence[tuple[Sequence[int], Sequence[int]]]) -> Noise | None:
        """Noise of Δ at points whose deeper and shallower runs are ``rows`` (one run each
        side); None when a point's run is not in the model."""
        sd, dof = [], []
        for deep, shallow in rows:
            if len(deep) != 1 or len(shallow) != 1:
                return None
            deep_part, shallow_part = self.by_row.get(deep[0]), self.by_row.get(shallow[0])
            if deep_part is None or shallow_part is None:
                return None
            variance, nu = _welch([deep_part, shallow_part])
            sd.append(math.sqrt(variance))
            dof.append(nu)
        if not sd:
            return None
        sd_a, dof_a = np.array(sd), np.array(dof)
        return Noise(sd_a, dof_a, float(dof_a.min()), vocabulary.NOISE_CHECKPOINT_JITTER)

    def describe(self) -> str:
        """The method in one sentence, with its units."""
        return (
            f"checkpoint jitter: residual sd of each run's loss about a cubic in ln "
            f"{self.order} over the last {JITTER_SHARE:.0%} of its checkpoints (at least "
            f"{JITTER_MIN_POINTS}) up to the one compared, pooled per depth (a run beyond the "
            f"{FLAG_QUANTILE:.1%} quantile of its depth's median-based scale keeps its own); "
            "sd of Δ = sqrt(sum of the two runs' variances)"
        )


def _welch(parts: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Sum of variances and its Welch-Satterthwaite degrees of freedom."""
    total = sum(v for v, _ in parts)
    denominator = sum(v * v / nu for v, nu in parts if v > 0)
    return total, (total * total / denominator if denominator > 0 else math.inf)


# --------------------------------------------------------------------------- one run


def curve_residuals(log_order: np.ndarray, loss: np.ndarray) -> tuple[float, int] | None:
    """(ss, dof) of ``loss`` about a degree-JITTER_DEGREE polynomial in ``log_order``; None
    without a residual degree of freedom."""
    centred = log_order - log_order.mean()  # conditioning: ln tokens is ~20, its cube ~8,000
    design = np.vander(centred, JITTER_DEGREE + 1)
    dof = loss.size - design.shape[1]
    if dof < 1:
        return None
    # lstsq's rank uses matrix_rank's cut-off (eps * max(M, N) * largest singular value):
    # one SVD per run instead of two
    coef, _, rank, _ = np.linalg.lstsq(design, loss, rcond=None)
    if rank < design.shape[1]:
        return None
    resid = loss - design @ coef
    return float(resid @ resid), int(dof)


def _history(index: list[int], usable: np.ndarray, order: np.ndarray, used: int) -> list[int]:
    """The run's usable checkpoints up to the used one, in order, its later share kept.
    ``usable``: the whole table's mask, made once (made per run, it cost runs x rows)."""
    candidates = np.asarray(index)
    rows = candidates[usable[candidates] & (order[candidates] <= order[used])]
    rows = rows[np.argsort(order[rows], kind="stable")].tolist()  # stable: ties in row order
    keep = max(JITTER_MIN_POINTS, math.ceil(JITTER_SHARE * len(rows)))
    return rows[-keep:] if len(rows) >= JITTER_MIN_POINTS else []


def run_jitter(
    table: RunTable, tokens: float | None = None
) -> tuple[str, list[int], list[RunJitter]]:
    """(ordering column, every run's used row index, the measured runs' jitter) of a
    validated table; the ordering column is "" (nothing measured) without tokens or steps."""
    name, order = checkpoint_order(table)
    groups = run_groups(table)
    used = [pick_checkpoint(ix, order, tokens) for ix in groups.values()]
    if not name:
        return name, used, []
    measured = []
    usable = ~table.is_failed() & np.isfinite(table.loss) & (order > 0)
    for index, row in zip(groups.values(), used, strict=True):
        history = _history(index, usable, order, row)
        fitted = curve_residuals(np.log(order[history]), table.loss[history]) if history else None
        if fitted is not None and fitted[0] / fitted[1] > JITTER_FLOOR**2:
            depth, params = float(table.depth[row]), float(table.params[row])
            source_row = int(table.row[row])
            measured.append(RunJitter(run_name(table, row), depth, params, source_row, *fitted))
    return name, used, measured


# --------------------------------------------------------------------------- pooling


def pool(runs: Sequence[RunJitter], depth: float) -> DepthJitter:
    """The robust pool of one depth's runs (module doc)."""
    dof = np.array([r.dof for r in runs], dtype=float)
    variance = np.array([r.variance for r in runs])
    typical = float(np.median(dof))
    scale = float(np.median(variance)) / (stats.chi2.median(typical) / typical)
    limit = scale * stats.chi2.ppf(FLAG_QUANTILE, dof) / dof
    flagged = variance > limit
    kept_ss = float(sum(r.ss for r, f in zip(runs, flagged, strict=True) if not f))
    kept_dof = float(dof[~flagged].sum())
    sd = math.sqrt(kept_ss / kept_dof) if kept_dof > 0 else math.nan
    outliers = tuple(r for r, f in zip(runs, flagged, strict=True) if f)
    return DepthJitter(depth, sd, kept_dof, int((~flagged).sum()), outliers)


def jitter_model(table: RunTable, tokens: float | None = None) -> JitterModel | None:
    """The jitter of every used run of a validated table; None where no run has
    JITTER_MIN_POINTS checkpoints (or the table orders none)."""
    name, used, measured = run_jitter(table, tokens)
    if not measured:
        return None
    by_depth: dict[float, list[RunJitter]] = {}
    for run in measured:
        by_depth.setdefault(run.depth, []).append(run)
    depths = {d: pool(runs, d) for d, runs in sorted(by_depth.items())}
    flagged = {r.row for d in depths.values() for r in d.flagged}
    overall = pool([r for r in measured if r.row not in flagged], math.nan)
    by_row: dict[int, tuple[float, float]] = {}
    own = {r.row: r for r in measured}
    for i in used:
        row, depth = int(table.row[i]), float(table.depth[i])
        shared = depths.get(depth, overall)
        if row in flagged:  # a flagged run is measured: it keeps its own jitter
            by_row[row] = (own[row].variance, own[row].dof)
        else:
            by_row[row] = (shared.sd**2, shared.dof)
    return JitterModel(name, tuple(depths.values()), overall, by_row, len(measured), len(used))
