"""Inputs and outputs of the fit (orchestration layer: pandas, pyarrow; no matplotlib, no torch).

Reads the points to fit from an experiment directory, its ``transitions.parquet`` or a CSV of
``depth,width,width_err`` (published tables), and writes ``fit.json`` and
``projections.parquet`` with the conventions of :mod:`dwtune.storage.provenance`: atomic writes, and
the resolved spec, package versions and git revision as metadata.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from dwtune.core.errors import InputError, shown
from dwtune.core.fit import (
    CensoredPair,
    FitResult,
    TransitionObservation,
    fit_law,
    fit_transitions,
)
from dwtune.core.projection import DepthWidthLaw
from dwtune.core.vocabulary import (
    TRANSITIONS_FILE,
    TransitionStatus,
)
from dwtune.storage import loaders
from dwtune.storage.provenance import provenance, read_parquet_checked
from dwtune.storage.store import ExperimentStore, atomic_write_text

TRANSITION_COLUMNS = ("status", "depth_deep", "width_deep", "width_deep_err")
CSV_COLUMNS = ("depth", "width", "width_err")
TRANSITIONS_HINT = "expected the transitions schema (pair, depth_deep, status, width_deep, ...)"
CSV_HINT = "expected a header line depth,width,width_err"
GIT_KEY = "dwtune.git_revision"  # the provenance key that is plain text, not JSON
SIGMA_COLUMN = "sigma_ln"  # σ(ln N*) where the transitions table carries it


@dataclass(frozen=True)
class FitInput:
    """Points to fit (bracketed transitions) plus the pairs listed but not fitted."""

    depths: tuple[float, ...]
    widths: tuple[float, ...]
    width_errs: tuple[float, ...]
    labels: tuple[str, ...]
    censored: tuple[CensoredPair, ...]
    simulated: bool
    source: str
    seeds: tuple[int, ...] = ()  # seeds behind each point, where the table says
    # Every pair of a transitions table (censored ones with their bound); () for a CSV table.
    observations: tuple[TransitionObservation, ...] = ()

    def fit(self) -> FitResult:
        """The censored likelihood over every pair of a study; WLS for a published table.

        Without censored pairs the two are the same fit (dwtune.core.fit.censored)."""
        if self.observations:
            return fit_law(self.observations, listed=self.censored)
        return fit_transitions(
            self.depths, self.widths, self.width_errs, labels=self.labels, censored=self.censored
        )


# ---------------------------------------------------------------- reading


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def read_table(path: Path, required: tuple[str, ...], hint: str) -> pd.DataFrame:
    """A Parquet or CSV file with ``required`` columns; anything else is one-line InputError."""
    if path.suffix != ".csv":
        return read_parquet_checked(path, required).to_pandas()
    if not path.is_file():
        raise InputError(f"{path}: no such file; pass an experiment directory, a Parquet or CSV")
    try:
        frame = pd.read_csv(path, skipinitialspace=True)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise InputError(f"{path}: cannot read it as CSV ({_first_line(exc)})") from exc
    require_columns(frame, required, path, hint)
    return frame


def require_columns(frame: pd.DataFrame, columns: tuple[str, ...], path: Path, hint: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)}; {hint}")


def _numeric(frame: pd.DataFrame, column: str, path: Path) -> pd.Series:
    """The column as floats; text that is not a number names the column and row."""
    values = pd.to_numeric(frame[column], errors="coerce")
    bad = values.isna() & frame[column].notna()
    if bad.any():
        row = int(bad.to_numpy().nonzero()[0][0])
        raise InputError(
            f"{path}: column {column} row {row + 1}: got {shown(frame[column].iloc[row])}; "
            "expected a number"
        )
    return values.astype(float)


def _is_simulated(frame: pd.DataFrame) -> bool:
    return "simulated" in frame.columns and bool(
        frame["simulated"].fillna(False).astype(bool).any()
    )


def _row_number(row: pd.Series, name: str) -> float:
    value = row.get(name, math.nan)
    try:
        return float(value) if value is not None and pd.notna(value) else math.nan
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"pair {row.get('pair', '?')}: {name} = {shown(value)} is not a number"
        ) from exc


def censored_pair(row: pd.Series) -> CensoredPair:
    """A transitions row that is not bracketed, as the fit lists it (NaN where unknown)."""
    deep, shallow, seeds = (_row_number(row, k) for k in ("depth_deep", "depth_shallow", "seeds"))
    if not math.isfinite(deep):
        raise InputError(f"pair {row.get('pair', '?')}: depth_deep is missing; re-export it")
    return CensoredPair(
        pair=str(row.get("pair", f"{shallow:g}-{deep:g}")),
        status=str(row["status"]),
        depth_shallow=int(shallow) if math.isfinite(shallow) else 0,
        depth_deep=int(deep),
        n_low=_row_number(row, "n_star_low"),
        n_high=_row_number(row, "n_star_high"),
        seeds=int(seeds) if math.isfinite(seeds) else 0,
    )


def _sigma_ln(row: pd.Series) -> tuple[float, str]:
    """σ(ln N*) of a row and the column it came from: its own column where the table has
    one, else 2·width_err/width."""
    own = _row_number(row, SIGMA_COLUMN) if SIGMA_COLUMN in row.index else math.nan
    if math.isfinite(own):
        return own, SIGMA_COLUMN
    err = _row_number(row, "width_deep_err")
    return 2.0 * err / _row_number(row, "width_deep"), "width_err"


def observation(row: pd.Series, label: str) -> TransitionObservation:
    """A transitions row as the fit's observation (bound of a censored pair: its range end)."""
    status = str(row["status"])
    listed = censored_pair(row)
    seeds = listed.seeds
    if status != TransitionStatus.BRACKETED:
        bound = listed.bound
        log_n = math.log(bound) if math.isfinite(bound) else math.nan
        return TransitionObservation(
            label, listed.depth_shallow, listed.depth_deep, status, log_n, math.nan, seeds,
            direction=listed.direction if status == TransitionStatus.UNDECIDED else None,
        )  # fmt: skip
    n_star = _row_number(row, "n_star")
    if not (math.isfinite(n_star) and n_star > 0):  # older tables: N* from the width
        n_star = 12.0 * listed.depth_deep * _row_number(row, "width_deep") ** 2
    sigma, field = _sigma_ln(row)
    return TransitionObservation(
        label, listed.depth_shallow, listed.depth_deep, status, math.log(n_star), sigma, seeds,
        sigma_field=field,
    )  # fmt: skip


def points_from_transitions(frame: pd.DataFrame, path: Path) -> FitInput:
    """Bracketed rows are points (depth_deep, width_deep, width_deep_err); others are listed."""
    require_columns(frame, TRANSITION_COLUMNS, path, TRANSITIONS_HINT)
    _check_status(frame, path)
    bracketed = frame[frame["status"] == TransitionStatus.BRACKETED]
    labels = (
        [f"pair {p}" for p in bracketed["pair"]]
        if "pair" in frame.columns
        else [f"row {i + 1}" for i in bracketed.index]
    )
    return FitInput(
        depths=tuple(_numeric(bracketed, "depth_deep", path)),
        widths=tuple(_numeric(bracketed, "width_deep", path)),
        width_errs=tuple(_numeric(bracketed, "width_deep_err", path)),
        labels=tuple(labels),
        censored=tuple(
            censored_pair(r)
            for _, r in frame[frame["status"] != TransitionStatus.BRACKETED].iterrows()
        ),
        simulated=_is_simulated(frame),
        source=str(path),
        seeds=tuple(_seed_counts(bracketed, path)),
        observations=tuple(
            observation(row, _pair_label(row, i)) for i, (_, row) in enumerate(frame.iterrows())
        ),
    )


def _pair_label(row: pd.Series, index: int) -> str:
    return f"pair {row['pair']}" if "pair" in row.index else f"row {index + 1}"


MAX_SEED_COUNT = 10**6  # seeds behind one transition point


def _seed_counts(rows: pd.DataFrame, path: Path) -> list[int]:
    if "seeds" not in rows.columns:
        return []
    counts = _numeric(rows, "seeds", path).fillna(0)
    bad = ~counts.between(0, MAX_SEED_COUNT) | (counts != counts.round())
    if bad.any():
        raise InputError(
            f"{path}: column seeds: got {shown(counts[bad].iloc[0])}; expected a whole count "
            f"0..{MAX_SEED_COUNT}"
        )
    return [int(n) for n in counts]


def _check_status(frame: pd.DataFrame, path: Path) -> None:
    """The status column holds strings; lists or numbers there are not a dwtune export."""
    bad = [v for v in frame["status"] if not isinstance(v, str)]
    if bad:
        raise InputError(
            f"{path}: column status: got {shown(bad[0])}; expected strings such as 'bracketed'; "
            f"{TRANSITIONS_HINT}"
        )


def points_from_csv(frame: pd.DataFrame, path: Path) -> FitInput:
    """A published table: one row per transition, columns depth, width, width_err."""
    return FitInput(
        depths=tuple(_numeric(frame, "depth", path)),
        widths=tuple(_numeric(frame, "width", path)),
        width_errs=tuple(_numeric(frame, "width_err", path)),
        labels=tuple(f"{path.name} row {i + 1}" for i in range(len(frame))),
        censored=(),
        simulated=_is_simulated(frame),
        source=str(path),
    )


def load_fit_input(target: str | Path) -> FitInput:
    """Points from an experiment directory, a transitions Parquet file or a CSV table."""
    path = Path(target)
    if path.is_dir():
        path = ExperimentStore(path).inside(path / TRANSITIONS_FILE)
        if not path.is_file():
            raise InputError(
                f"{path}: not found; run the refine stage first (dwtune refine {path.parent}) "
                "or pass a CSV with columns depth,width,width_err"
            )
    if path.suffix not in (".parquet", ".csv"):
        raise InputError(f"{path}: expected an experiment directory, a .parquet or a .csv file")
    if path.suffix == ".csv":
        return points_from_csv(read_table(path, CSV_COLUMNS, CSV_HINT), path)
    return points_from_transitions(read_table(path, TRANSITION_COLUMNS, TRANSITIONS_HINT), path)


FIT_JSON_ADVICE = "rewrite it with `dwtune fit --json` or `dwtune report`"
MAX_LAW_ABS = 1e3  # |a|, |b| and |cov| of any plausible law of ln dx* (published: a≈5, b≈0.05)


def _check_law_numbers(law) -> None:
    numbers = [law.a, law.b, *law.cov[0], *law.cov[1]]
    if not all(math.isfinite(x) and abs(x) <= MAX_LAW_ABS for x in numbers):
        raise ValueError(f"a, b and cov must be finite and within ±{MAX_LAW_ABS:g}")
    if law.cov[0][0] < 0 or law.cov[1][1] < 0:
        raise ValueError("cov has a negative variance")
    if law.chi2_red < 0 or law.dof < 0:  # NaN (not recorded) passes: normal intervals
        raise ValueError("chi2_red must be a non-negative number and dof a count")


def law_from_json(path: Path) -> tuple[DepthWidthLaw, bool]:
    """(law, simulated) from a ``fit.json`` written by :func:`fit_to_dict` (status 'fitted')."""
    data = loaders.read_json(path, FIT_JSON_ADVICE)
    if not isinstance(data, dict) or data.get("status") != "fitted":
        reason = data.get("reason", "no 'status': 'fitted'") if isinstance(data, dict) else ""
        raise InputError(f"{path}: holds no fit ({reason}); collect more transitions first")
    try:
        (c00, c01), (c10, c11) = data["cov"]
        cov = ((float(c00), float(c01)), (float(c10), float(c11)))
        # chi2_red and dof widen the intervals; a fit.json without them gets normal ones.
        scatter = float(data.get("chi2_red") or math.nan), int(data.get("dof") or 0)
        law = DepthWidthLaw("study", float(data["a"]), float(data["b"]), cov, str(path), *scatter)
        _check_law_numbers(law)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise InputError(
            f"{path}: a, b, cov (2x2), chi2_red or dof missing or not numbers "
            f"({_first_line(exc)}); rewrite it with `dwtune fit --json` or `dwtune report`"
        ) from exc
    return law, bool(data.get("simulated", False))


def no_projection_reason(fit: FitResult) -> str:
    """Why a fit gives no projection ("" when it does): the slope must be positive."""
    if fit.b > 0:
        return ""
    return f"fitted slope b = {fit.b:.3g} is not positive: no optimal depth to project"


def read_fit_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read it as JSON ({_first_line(exc)})") from exc
    if not isinstance(data, dict) or "status" not in data:
        raise InputError(f"{path}: not a dwtune fit.json (no 'status'); rerun `dwtune report`")
    return data


def _number(value: object) -> float:
    return math.nan if value is None else float(value)  # JSON null is a NaN (see json_ready)


def fit_from_dict(data: dict, path: Path) -> FitResult:
    """The FitResult a ``fit.json`` of status 'fitted' was written from (:func:`fit_to_dict`)."""
    try:
        points = data["points"]
        (c00, c01), (c10, c11) = data["cov"]
        return FitResult(
            **{k: _number(data[k]) for k in ("a", "b", "se_a", "se_b", "r2", "chi2_red")},
            cov=((_number(c00), _number(c01)), (_number(c10), _number(c11))),
            dof=int(data["dof"]),
            n_points=int(data["n_points"]),
            depths=tuple(_number(p["depth"]) for p in points),
            widths=tuple(_number(p["width"]) for p in points),
            width_errs=tuple(_number(p["width_err"]) for p in points),
            labels=tuple(str(p["label"]) for p in points),
            censored=tuple(_censored_from_dict(c) for c in data.get("censored", ())),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(
            f"{path}: a fitted fit.json lacks a field or holds a non-number "
            f"({_first_line(exc)}); rewrite it with `dwtune report`"
        ) from exc


def _censored_from_dict(raw: dict) -> CensoredPair:
    numbers = {k: _number(raw[k]) for k in ("n_low", "n_high") if k in raw}
    return CensoredPair(**(raw | numbers))


# ---------------------------------------------------------------- serialising


def json_ready(value: object) -> object:
    """JSON has no NaN or inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    return value


def points_dicts(depths, widths, errs, labels, seeds=()) -> list[dict]:
    """One dict per fitted point; ``seeds`` (count behind each) where the table gives it."""
    counts = list(seeds) or [None] * len(depths)
    return [
        {"label": lab, "depth": d, "width": w, "width_err": e, "sigma_ln_width": e / w, "seeds": n}
        for d, w, e, lab, n in zip(depths, widths, errs, labels, counts, strict=True)
    ]


def fit_to_dict(
    fit: FitResult, level: float, simulated: bool, source: str, seeds: tuple[int, ...] = ()
) -> dict:
    """Everything ``dwtune fit --json`` prints and ``fit.json`` holds (NaN -> null)."""
    return json_ready(
        {
            "status": "fitted",
            "model": "ln dx* = a + b*L (natural log; N = 12*L*dx^2)",
            "source": source,
            "simulated": simulated,
            "a": fit.a,
            "b": fit.b,
            "se_a": fit.se_a,
            "se_b": fit.se_b,
            "cov": fit.cov,
            "level": level,
            "ci_a": fit.interval("a", level),
            "ci_b": fit.interval("b", level),
            "r2": fit.r2,
            "chi2_red": fit.chi2_red,
            "dof": fit.dof,
            "n_points": fit.n_points,
            "errors_scaled_by_chi2_red": False,
            # ci_a, ci_b and the projections' intervals: estimate ± interval_quantile·se.
            "interval_quantile": fit.quantile(level),
            "interval_rule": "max(z, t_dof * sqrt(chi2_red))",
            "points": points_dicts(fit.depths, fit.widths, fit.width_errs, fit.labels, seeds),
            "censored": [asdict(c) for c in fit.censored],
            # Since the interval-censored fit: how it was fitted and what it left out.
            "method": fit.method,
            "errors_from": "observed information (inverse Hessian of -log L)",
            "log_likelihood": fit.log_likelihood,
            "censored_in_fit": list(fit.censored_fitted),
            "excluded": [{"label": label, "reason": why} for label, why in fit.excluded],
        }
    )


def no_fit_dict(points: FitInput, reason: str) -> dict:
    """``fit.json`` when there is nothing to fit: what was found instead."""
    return json_ready(
        {
            "status": "insufficient",
            "reason": reason,
            "source": points.source,
            "simulated": points.simulated,
            "points": points_dicts(
                points.depths, points.widths, points.width_errs, points.labels, points.seeds
            ),
            "censored": [asdict(c) for c in points.censored],
        }
    )


# ---------------------------------------------------------------- writing


def write_json_atomic(path: Path, data: dict) -> Path:
    atomic_write_text(path, json.dumps(data, indent=2, allow_nan=False) + "\n")
    return path


def metadata_json(spec: dict | None) -> dict:
    """The Parquet provenance (resolved spec, versions, git revision) as plain JSON."""
    raw = {key.decode(): value.decode() for key, value in provenance(spec).items()}
    return {key: value if key == GIT_KEY else json.loads(value) for key, value in raw.items()}
