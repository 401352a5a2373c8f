"""The study's report: report.md, figures and a TensorBoard summary of the fit.

The report only renders: it reads the tables and the fit stage's ``fit.json`` and
``projections.parquet`` (:mod:`.load`), draws (:mod:`.figures`) and writes Markdown
(:mod:`.markdown`). Partial studies (no transitions yet, fewer than 3 bracketed pairs, a slope
that is not positive) get a report that says plainly what was found, never a traceback.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

<<<<<<< HEAD
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

from dwtune.core.errors import InputError
from dwtune.core.fit import CensoredPair, FitResult
from dwtune.core.projection import LEVINE2020, DepthWidthLaw, project_budget, project_depth
from dwtune.core.units import format_size, parse_size
from dwtune.core.vocabulary import COMPLETED_STATUSES, STAGE_LR_SEARCH
from dwtune.outputs.fit_files import (
    FIT_FILE,
    GIT_KEY,
    PROJECTIONS_FILE,
    SPEC_FILE,
    TRANSITIONS_FILE,
    TRIALS_FILE,
    FitInput,
    censored_pair,
    fit_to_dict,
    metadata_json,
    no_fit_dict,
    points_from_transitions,
    projection_row,
    read_table,
    write_json_atomic,
    write_projections,
)
from dwtune.outputs.lr_figure import plot_best_lr  # issue 12: best rate against width
from dwtune.outputs.tables import CURVES_FILE
from dwtune.storage.store import atomic_write_bytes, atomic_write_text

LEVEL = 0.95
REPORT_FILE = "report.md"
FIGURES_DIR = "figures"
TB_DIR = Path("tb") / "fit"
# Budgets (parameters) tabulated when the spec names none: GPT-3, 1T, the curve's end.
DEFAULT_BUDGETS = (1.75e11, 1e12, 1e13)
GPT3 = {"budget": 1.75e11, "depth": 96, "width": 12288}
CURVE_MAX = 1e13  # parameters; figure 4 runs up to here
CURVE_STEPS_PER_DECADE = 8
CURVE_COLUMNS = ("trial_id", "step", "val_loss")
TRIAL_COLUMNS = ("depth", "budget", "params_non_embedding", "status", "best_val_loss")
PAIR_COLUMNS = ("pair", "depth_shallow", "depth_deep", "status")
SIM_BANNER = "SIMULATED DATA: a planted loss surface, not a measurement of any model"


@dataclasses.dataclass(frozen=True)
class Study:
    """What the experiment directory holds, read once."""

    exp_dir: Path
    name: str
    trials: pd.DataFrame  # every row of trials.parquet (empty if the file is missing)
    transitions: pd.DataFrame | None  # None if transitions.parquet is missing
    simulated: bool
    spec: dict | None
    notes: tuple[str, ...]  # what is missing or could not be read

    @property
    def completed(self) -> pd.DataFrame:
        """Trials with a usable loss: finished or early-stopped, finite best_val_loss."""
        ok = self.trials["status"].isin(COMPLETED_STATUSES)
        return self.trials[ok & np.isfinite(self.trials["best_val_loss"].astype(float))]


@dataclasses.dataclass(frozen=True)
class FitOutcome:
    points: FitInput | None
    fit: FitResult | None
    law: DepthWidthLaw | None  # None when there is no fit or the slope is not positive
    reason: str  # why there is no fit / no projection ("" when there is)
=======
from dwtune.core.vocabulary import FIT_FILE, PROJECTIONS_FILE, REPORT_FILE
from dwtune.outputs.report.figures import draw_figures
from dwtune.outputs.report.load import TB_FIT, cell_table, load_fit, load_study, table_budgets
from dwtune.outputs.report.markdown import _fit_section, _header, _markdown
from dwtune.storage.store import atomic_write_text
>>>>>>> main


@dataclasses.dataclass(frozen=True)
class ReportFiles:
    report: Path
    fit_json: Path
    projections: Path
    figures: tuple[Path, ...]
    tensorboard: Path | None


<<<<<<< HEAD
# ---------------------------------------------------------------- loading


def _any_true(frame: pd.DataFrame | None) -> bool:
    if frame is None or "simulated" not in frame.columns:
        return False
    return bool(frame["simulated"].fillna(False).astype(bool).any())


def _read_spec(exp_dir: Path) -> tuple[dict | None, str]:
    path = exp_dir / SPEC_FILE
    if not path.is_file():
        return None, ""
    import yaml

    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        return None, f"{SPEC_FILE} could not be read ({type(exc).__name__}); defaults used"
    return (spec if isinstance(spec, dict) else None), ""


def _read_trials(exp_dir: Path) -> tuple[pd.DataFrame, str]:
    path = exp_dir / TRIALS_FILE
    if not path.is_file():
        note = f"{TRIALS_FILE} not found (run `dwtune export {exp_dir}`): no losses to plot"
        return pd.DataFrame({c: pd.Series(dtype=float) for c in TRIAL_COLUMNS}), note
    trials = read_table(path, TRIAL_COLUMNS, "expected the trials schema of dwtune export")
    return trials[trials.stage != STAGE_LR_SEARCH], ""  # search trials: reduced fidelity


def _read_transitions(exp_dir: Path) -> tuple[pd.DataFrame | None, str]:
    path = exp_dir / TRANSITIONS_FILE
    if not path.is_file():
        return None, f"{TRANSITIONS_FILE} not found: no refine stage results yet"
    return read_table(path, PAIR_COLUMNS, "expected the transitions schema"), ""


def load_study(exp_dir: str | Path) -> Study:
    exp_dir = Path(exp_dir).resolve()
    if not exp_dir.is_dir():
        raise InputError(f"{exp_dir}: not a directory; pass an experiment directory")
    if not (exp_dir / TRIALS_FILE).is_file() and not (exp_dir / TRANSITIONS_FILE).is_file():
        raise InputError(
            f"{exp_dir}: no {TRIALS_FILE} or {TRANSITIONS_FILE}; run `dwtune run` or "
            f"`dwtune export {exp_dir}` first"
        )
    trials, trials_note = _read_trials(exp_dir)
    transitions, transitions_note = _read_transitions(exp_dir)
    spec, spec_note = _read_spec(exp_dir)
    name = str(spec.get("name", exp_dir.name)) if spec else exp_dir.name
    return Study(
        exp_dir=exp_dir,
        name=name,
        trials=trials,
        transitions=transitions,
        simulated=_any_true(trials) or _any_true(transitions),
        spec=spec,
        notes=tuple(n for n in (trials_note, transitions_note, spec_note) if n),
    )


# ---------------------------------------------------------------- tables


def cell_table(completed: pd.DataFrame) -> pd.DataFrame:
    """One row per (depth, budget): mean size, loss mean/sd over seeds, seed count."""
    if completed.empty:
        columns = ["depth", "budget", "size", "width", "loss", "loss_sd", "n"]
        return pd.DataFrame(columns=columns)
    frame = completed.assign(loss=completed["best_val_loss"].astype(float))
    if "width" not in frame.columns:
        frame = frame.assign(width=np.nan)
    grouped = frame.groupby(["depth", "budget"], as_index=False)
    return grouped.agg(
        size=("params_non_embedding", "mean"),
        width=("width", "first"),
        loss_sd=("loss", "std"),  # NaN with one seed
        n=("loss", "size"),
        loss=("loss", "mean"),
    ).sort_values(["depth", "size"])


def depth_pairs(study: Study, cells: pd.DataFrame) -> list[tuple[str, int, int]]:
    """(label, shallow, deep): the transitions' pairs, else neighbouring depths of the grid."""
    if study.transitions is not None and not study.transitions.empty:
        rows = study.transitions.drop_duplicates("pair")
        return [
            (str(r.pair), int(r.depth_shallow), int(r.depth_deep))
            for r in rows.itertuples(index=False)
        ]
    depths = sorted(int(d) for d in cells["depth"].unique())
    return [(f"{s}-{d}", s, d) for s, d in itertools.pairwise(depths)]


def delta_table(cells: pd.DataFrame, shallow: int, deep: int) -> pd.DataFrame:
    """Δ loss = deep − shallow at each budget both depths reached (same target size).

    The x position is the geometric mean of the two nets' non-embedding sizes (they differ
    only by width rounding); the error is the unpaired standard error of the difference.
    """
    left = cells[cells["depth"] == shallow]
    right = cells[cells["depth"] == deep]
    both = left.merge(right, on="budget", suffixes=("_s", "_d"))
    return pd.DataFrame(
        {
            "size": np.sqrt(both["size_s"].astype(float) * both["size_d"].astype(float)),
            "delta": both["loss_d"] - both["loss_s"],
            "err": np.sqrt(
                both["loss_sd_d"] ** 2 / both["n_d"] + both["loss_sd_s"] ** 2 / both["n_s"]
            ),
            "seeds": np.minimum(both["n_d"], both["n_s"]),
        }
    ).sort_values("size")


def best_depth_table(cells: pd.DataFrame) -> pd.DataFrame:
    """At each budget, the depth with the lowest mean loss and its margin over the runner-up."""
    rows = []
    for budget, group in cells.groupby("budget"):
        ranked = group.sort_values("loss")
        best = ranked.iloc[0]
        margin = ranked.iloc[1]["loss"] - best["loss"] if len(ranked) > 1 else math.nan
        rows.append(
            {
                "budget": budget,
                "depth": int(best["depth"]),
                "width": best["width"],
                "loss": best["loss"],
                "margin": margin,
                "seeds": int(best["n"]),
            }
        )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- fit and projection


def fit_study(study: Study) -> FitOutcome:
    """The fit over bracketed transitions, or the plain reason there is none."""
    if study.transitions is None:
        return FitOutcome(None, None, None, f"no {TRANSITIONS_FILE} yet")
    points = points_from_transitions(study.transitions, study.exp_dir / TRANSITIONS_FILE)
    try:
        fit = points.fit()
    except InputError as exc:
        return FitOutcome(points, None, None, str(exc))
    if not fit.b > 0:
        reason = f"fitted slope b = {fit.b:.3g} is not positive: no optimal depth to project"
        return FitOutcome(points, fit, None, reason)
    return FitOutcome(points, fit, DepthWidthLaw.from_fit(fit, source=points.source), "")


def table_budgets(study: Study) -> tuple[list[float], str]:
    """Budgets to tabulate: the spec's ``fit.budgets`` if it has them, else the defaults."""
    section = (study.spec or {}).get("fit")
    if section is not None and not isinstance(section, dict):
        return list(DEFAULT_BUDGETS), f"{SPEC_FILE}: fit is not a mapping; default budgets used"
    wanted = section.get("budgets") if section else None
    if isinstance(wanted, str | int | float):
        wanted = [wanted]  # a single budget written without brackets
    if not wanted:
        return list(DEFAULT_BUDGETS), ""
    try:
        return sorted({parse_size(b, field="fit.budgets") for b in wanted}), ""
    except InputError as exc:
        return list(DEFAULT_BUDGETS), f"{exc}; default budgets used"


def curve_budgets(study: Study) -> np.ndarray:
    """Budgets for figure 4: from the study's smallest size (or 1e6) to 1e13, log-spaced."""
    sizes = study.completed["params_non_embedding"].astype(float)
    low = min(1e6, float(sizes.min())) if not sizes.empty else 1e6
    start = math.floor(math.log10(low))
    exponents = np.arange(start, math.log10(CURVE_MAX) + 1e-9, 1.0 / CURVE_STEPS_PER_DECADE)
    return 10.0**exponents


def study_depths(outcome: FitOutcome) -> list[float]:
    measured = set(outcome.points.depths) if outcome.points is not None else set()
    return sorted(measured | {float(GPT3["depth"])})


def projection_rows(study: Study, outcome: FitOutcome, budgets: list[float]) -> pd.DataFrame:
    """projections.parquet's rows: every law x (curve and table budgets, depths)."""
    laws = [(outcome.law, study.simulated)] if outcome.law is not None else []
    laws.append((LEVINE2020, False))
    grid = sorted(set(curve_budgets(study).tolist()) | set(budgets))
    rows = []
    for law, simulated in laws:
        rows += [projection_row(project_budget(law, n, LEVEL), simulated) for n in grid]
        depths = study_depths(outcome)
        rows += [projection_row(project_depth(law, d, LEVEL), simulated) for d in depths]
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- figures


def _new_figure(width: float, height: float, study: Study) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    if study.simulated:
        fig.text(
            0.5,
            0.5,
            "SIMULATED",
            fontsize=64,
            color="red",
            alpha=0.12,
            rotation=25,
            ha="center",
            va="center",
            zorder=0,
            fontweight="bold",
        )
    return fig


def _title(fig: Figure, study: Study, text: str) -> None:
    if study.simulated:
        text = f"SIMULATED DATA  ·  {text}"
    fig.suptitle(text, color="red" if study.simulated else "black", fontsize=12)


def _save(fig: Figure, path: Path) -> Path:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    atomic_write_bytes(path, buffer.getvalue())
    return path


def _depth_colors(depths: list[int]) -> dict[int, tuple]:
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    span = max(len(depths) - 1, 1)
    return {d: cmap(0.9 * i / span) for i, d in enumerate(sorted(depths))}


def plot_loss_vs_size(study: Study, cells: pd.DataFrame, path: Path) -> Path:
    """Figure 1: best validation loss against non-embedding size, one line per depth."""
    fig = _new_figure(7.5, 5, study)
    ax = fig.add_subplot()
    colors = _depth_colors([int(d) for d in cells["depth"].unique()])
    for depth, group in cells.groupby("depth"):
        ax.errorbar(
            group["size"],
            group["loss"],
            yerr=group["loss_sd"].fillna(0.0),
            marker="o",
            ms=4,
            capsize=2,
            color=colors[int(depth)],
            label=f"L = {int(depth)}",
        )
    if cells.empty:
        ax.text(0.5, 0.5, "no completed trials yet", ha="center", transform=ax.transAxes)
    else:
        ax.set_xscale("log")
        ax.legend(title="depth", fontsize=8, ncols=2 if len(colors) > 6 else 1)
    ax.set_xlabel("non-embedding parameters N = 12·L·dx²")
    ax.set_ylabel("best validation loss (nats/token)")
    ax.grid(True, which="both", alpha=0.3)
    _title(fig, study, f"{study.name}: validation loss vs size per depth (bars: sd over seeds)")
    return _save(fig, path)


def plot_loss_curves(study: Study, path: Path) -> Path | None:
    """Figure 5: validation loss against training step for every trial, coloured by depth.

    Drawn from curves.parquet (absent before the first export: then no figure)."""
    curves_path = study.exp_dir / CURVES_FILE
    if not curves_path.is_file() or study.trials.empty or "trial_id" not in study.trials:
        return None
    curves = read_table(curves_path, CURVE_COLUMNS, "expected the curves schema of dwtune export")
    curves = curves.dropna(subset=["val_loss"]).merge(
        study.trials[["trial_id", "depth", "width"]], on="trial_id"
    )
    fig = _new_figure(7.5, 5, study)
    ax = fig.add_subplot()
    colors = _depth_colors([int(d) for d in curves["depth"].unique()])
    labelled: set[int] = set()
    for (depth, _), trial in curves.groupby(["depth", "trial_id"]):
        label = None if int(depth) in labelled else f"L = {int(depth)}"
        labelled.add(int(depth))
        ax.plot(
            trial["step"], trial["val_loss"], color=colors[int(depth)], lw=1, alpha=0.8, label=label
        )
    if labelled:
        ax.legend(title="depth", fontsize=8)
    ax.set_xlabel("training step")
    ax.set_ylabel("validation loss (nats/token)")
    ax.grid(True, alpha=0.3)
    _title(fig, study, f"{study.name}: validation loss curves, one line per trial")
    return _save(fig, path)


def _transition_row(study: Study, label: str) -> pd.Series | None:
    if study.transitions is None:
        return None
    rows = study.transitions[study.transitions["pair"].astype(str) == label]
    return rows.iloc[0] if not rows.empty else None


def _mark_transition(ax, row: pd.Series | None) -> str:
    """Draw what the refine stage found for this pair; return a short caption."""
    if row is None:
        return "no refine result"
    status = str(row["status"])
    if status == "bracketed":
        lo, hi, n = (float(row.get(c, math.nan)) for c in ("n_star_low", "n_star_high", "n_star"))
        if math.isfinite(lo) and math.isfinite(hi):
            ax.axvspan(lo, hi, color="tab:red", alpha=0.15, label="N* bracket")
        if math.isfinite(n):
            ax.axvline(n, color="tab:red", lw=1.5, label=f"N* = {n:.3g}")
        return f"bracketed, N* = {n:.3g}"
    pair = censored_pair(row)
    if math.isfinite(pair.bound):
        side = ">" if status == "censored_high" else "<"
        ax.axvline(pair.bound, color="tab:orange", ls="--", label=f"N* {side} {pair.bound:.3g}")
    return status.replace("_", " ")


def _seeds_of(row: pd.Series | None) -> str:
    if row is None or "seeds" not in row.index or pd.isna(row["seeds"]):
        return ""
    return f", {int(row['seeds'])} seed(s)"


def plot_deltas(study: Study, cells: pd.DataFrame, pairs: list, path: Path) -> Path:
    """Figure 2: Δ loss (deeper − shallower) against size per pair, transitions marked."""
    ncols = min(3, max(len(pairs), 1))
    nrows = max(math.ceil(len(pairs) / ncols), 1)
    # At least 7.5 inches wide so the title fits above a single pair.
    fig = _new_figure(max(4.6 * ncols, 7.5), 3.4 * nrows + 0.6, study)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False).ravel())
    for ax, (label, shallow, deep) in zip(axes, pairs, strict=False):
        delta = delta_table(cells, shallow, deep)
        ax.axhline(0.0, color="black", lw=0.8)
        ax.errorbar(
            delta["size"],
            delta["delta"],
            yerr=delta["err"].fillna(0.0),
            marker="o",
            ms=4,
            capsize=2,
            color="tab:blue",
            label="Δ (mean over seeds)",
        )
        row = _transition_row(study, label)
        caption = _mark_transition(ax, row) + _seeds_of(row)
        if not delta.empty:
            ax.set_xscale("log")
        ax.set_title(f"depth {deep} − depth {shallow}: {caption}", fontsize=9)
        ax.set_xlabel("non-embedding parameters N")
        ax.set_ylabel("Δ loss (deeper − shallower)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes[len(pairs) :]:
        ax.set_axis_off()
    if not pairs:
        axes[0].text(0.5, 0.5, "fewer than two depths: no pairs", ha="center")
    _title(fig, study, f"{study.name}: Δ loss per depth pair (below 0: the deeper net wins)")
    return _save(fig, path)


def _censored_bounds(outcome: FitOutcome) -> list[tuple[int, float, str]]:
    """(depth, ln dx bound, status) for censored pairs: N* bound -> dx = sqrt(N/(12·L))."""
    pairs = outcome.points.censored if outcome.points is not None else ()
    return [
        (c.depth_deep, 0.5 * math.log(c.bound / (12.0 * c.depth_deep)), c.status)
        for c in pairs
        if math.isfinite(c.bound)
    ]


def _draw_fit_line(ax, fit: FitResult, depths: np.ndarray) -> None:
    from dwtune.core.fit import z_value

    line, se = fit.line(depths)
    half = z_value(LEVEL) * se
    ax.fill_between(
        depths,
        line - half,
        line + half,
        color="tab:blue",
        alpha=0.2,
        label=f"{LEVEL:.0%} band of the fit",
    )
    ax.plot(
        depths,
        line,
        color="tab:blue",
        label=f"fit: a = {fit.a:.3f} ± {fit.se_a:.3f}, b = {fit.b:.4f} ± {fit.se_b:.4f}",
    )


def _draw_transition_points(ax, points: FitInput | None, bounds: list) -> None:
    """Bracketed transitions with ±1σ of ln dx*; censored pairs as one-sided bounds."""
    if points is not None and points.depths:
        w, e = np.array(points.widths), np.array(points.width_errs)
        ax.errorbar(
            points.depths,
            np.log(w),
            yerr=e / w,
            fmt="o",
            color="black",
            capsize=3,
            label="bracketed transitions (±1σ)",
        )
    for depth, value, status in bounds:
        marker = "^" if status == "censored_high" else "v"
        ax.plot([depth], [value], marker, color="tab:orange", ms=9, ls="none")
    if bounds:
        ax.plot([], [], "^", color="tab:orange", label="censored: dx* above (▲) / below (▼)")


def _dx_axis(ax) -> None:
    """Right-hand axis in dx* itself, so readers need not exponentiate."""
    secondary = ax.secondary_yaxis("right", functions=(np.exp, _safe_log))
    secondary.set_ylabel("dx* (width)")
    low, high = ax.get_ylim()  # ln dx; call after everything is drawn
    # Log-spaced ticks (1, 2, 5 x 10^k) over a wide range; plain ones when dx spans < 10x.
    wide = high - low > math.log(10.0)
    locator = LogLocator(base=10, subs=(1.0, 2.0, 5.0)) if wide else MaxNLocator(nbins=6)
    secondary.yaxis.set_major_locator(locator)
    secondary.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))


def plot_fit(study: Study, outcome: FitOutcome, path: Path) -> Path | None:
    """Figure 3: ln dx* against depth with error bars, fitted line and band, reference line."""
    points, bounds = outcome.points, _censored_bounds(outcome)
    if (points is None or not points.depths) and not bounds:
        return None
    fig = _new_figure(7.5, 5, study)
    ax = fig.add_subplot()
    top = max([*(points.depths if points else ()), *(b[0] for b in bounds)])
    depths = np.linspace(0.0, 1.1 * top, 200)
    if outcome.fit is not None:
        _draw_fit_line(ax, outcome.fit, depths)
    ax.plot(
        depths,
        LEVINE2020.a + LEVINE2020.b * depths,
        "--",
        color="gray",
        label=f"Levine et al. 2020: a = {LEVINE2020.a}, b = {LEVINE2020.b}",
    )
    _draw_transition_points(ax, points, bounds)
    _fit_caption(ax, outcome)
    ax.set_xlabel("depth L of the deeper net (layers)")
    ax.set_ylabel("ln dx* (width at the transition)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    _dx_axis(ax)
    _title(fig, study, f"{study.name}: transition width vs depth, ln dx* = a + b·L")
    return _save(fig, path)


def _safe_log(values: np.ndarray) -> np.ndarray:
    """ln for the secondary axis, which matplotlib also probes at 0 (dx = 0 has no ln)."""
    return np.log(np.clip(values, 1e-300, None))


def _fit_caption(ax, outcome: FitOutcome) -> None:
    """Fit quality (or why there is no fit) as the axes title, clear of every data point."""
    fit = outcome.fit
    if fit is None:
        text = "no fit: " + _short_reason(outcome.reason)
    else:
        text = f"R² = {fit.r2:.4f}, χ²_red = {fit.chi2_red:.3f} with {fit.dof} dof"
    ax.set_title(text, fontsize=9)


def _short_reason(reason: str) -> str:
    return reason.split(";")[0] if len(reason) > 60 else reason


def _plot_law(axes, rows: pd.DataFrame, law: str, style: dict) -> None:
    budget = rows[(rows["law"] == law) & (rows["query"] == "budget")].sort_values("n_params")
    for ax, column in zip(axes, ("depth", "width"), strict=True):
        ax.plot(budget["n_params"], budget[column], **style)
        lo, hi = budget[f"{column}_lo"], budget[f"{column}_hi"]
        if lo.notna().any():
            # An unbounded end (inf) is drawn to the top of the axes (clip below).
            top = np.where(np.isfinite(hi), hi, 1e300)
            ax.fill_between(
                budget["n_params"],
                lo,
                top,
                color=style["color"],
                alpha=0.18,
                label=f"{style['label']}: {LEVEL:.0%} interval",
            )


def _measured_span(study: Study, axes) -> None:
    sizes = study.completed["params_non_embedding"].astype(float)
    if sizes.empty:
        return
    for ax in axes:
        ax.axvspan(sizes.min(), sizes.max(), color="tab:green", alpha=0.1, label="sizes trained")


def plot_projection(study: Study, outcome: FitOutcome, rows: pd.DataFrame, path: Path) -> Path:
    """Figure 4: optimal depth and width against budget up to 1e13, study and reference."""
    fig = _new_figure(12, 5, study)
    axes = fig.subplots(1, 2)
    _measured_span(study, axes)
    reference_rows = rows[rows["law"] == LEVINE2020.name]
    ref_style = {"color": "gray", "ls": "--", "label": "Levine et al. 2020 (published a, b)"}
    _plot_law(axes, reference_rows, LEVINE2020.name, ref_style)
    if outcome.law is not None:
        _plot_law(axes, rows, outcome.law.name, {"color": "tab:blue", "label": "this study's fit"})
    else:
        axes[0].text(
            0.02,
            0.6,
            "no study fit:\n" + _short_reason(outcome.reason),
            transform=axes[0].transAxes,
            fontsize=8,
            va="top",
        )
    for ax, key in zip(axes, ("depth", "width"), strict=True):
        ax.plot(
            [GPT3["budget"]],
            [GPT3[key]],
            "*",
            color="tab:red",
            ms=12,
            label="GPT-3 175B (96 layers × 12288)",
        )
    _style_projection_axes(axes, reference_rows)
    _title(fig, study, f"{study.name}: projected optimal shape vs budget (12·L·dx² = N)")
    return _save(fig, path)


def _style_projection_axes(axes, reference_rows: pd.DataFrame) -> None:
    """Log budgets; limits from the central curves so an unbounded band does not flatten them."""
    top_depth = float(reference_rows["depth"].max())
    axes[0].set_ylim(0.0, 1.6 * max(top_depth, GPT3["depth"]))
    axes[0].set_ylabel("optimal depth L* (layers)")
    axes[1].set_yscale("log")
    widths = reference_rows["width"]
    axes[1].set_ylim(float(widths.min()) / 3, 3 * max(float(widths.max()), GPT3["width"]))
    axes[1].set_ylabel("width dx at the optimal depth")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlim(float(reference_rows["n_params"].min()), 1.2 * CURVE_MAX)
        ax.set_xlabel("budget N (non-embedding parameters)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")


def draw_figures(study, outcome, rows, cells) -> tuple[Path, ...]:
    folder = study.exp_dir / FIGURES_DIR
    pairs = depth_pairs(study, cells)
    paths = [
        plot_loss_vs_size(study, cells, folder / "1_loss_vs_size.png"),
        plot_deltas(study, cells, pairs, folder / "2_delta_per_pair.png"),
        plot_fit(study, outcome, folder / "3_fit_width_vs_depth.png"),
        plot_projection(study, outcome, rows, folder / "4_projection.png"),
        plot_loss_curves(study, folder / "5_loss_curves.png"),
    ]
    return tuple(p for p in paths if p is not None)


# ---------------------------------------------------------------- markdown


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _num(value: float, fmt: str = ".3g") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return "∞" if value == math.inf else format(value, fmt)


def _ratio(value: float) -> str:
    """How far a budget lies beyond the largest model trained: '17×', '5,714×'."""
    return _num(value, ",.0f" if value >= 10 else ".2g") + ("×" if math.isfinite(value) else "")


def _span(value: float, lo: float, hi: float, fmt: str) -> str:
    """``80.5 [79.9, 81.2]``; without an interval just the value."""
    if lo is None or (isinstance(lo, float) and math.isnan(lo)):
        return _num(value, fmt)
    close = ")" if hi == math.inf else "]"  # an open end: unbounded above
    return f"{_num(value, fmt)} [{_num(lo, fmt)}, {_num(hi, fmt)}{close}"


def _header(study: Study) -> list[str]:
    lines = [f"# dwtune report: {study.name}", ""]
    if study.simulated:
        lines += [f"> **⚠ {SIM_BANNER}.** Every number below comes from the simulated trainer.", ""]
    lines += [f"Experiment directory: `{study.exp_dir}`", ""]
    return lines + [f"- note: {n}" for n in study.notes] + ([""] if study.notes else [])


def _measured_section(study: Study, cells: pd.DataFrame) -> list[str]:
    trials, completed = study.trials, study.completed
    counts = ", ".join(f"{k}: {v}" for k, v in trials["status"].value_counts().items()) or "none"
    lines = ["## What was trained", "", f"{len(trials)} trials ({counts})."]
    if completed.empty:
        return [*lines, "", "No completed trials yet.", ""]
    sizes = completed["params_non_embedding"].astype(float)
    lines.append(
        f"Depths {', '.join(str(int(d)) for d in sorted(cells['depth'].unique()))}; "
        f"non-embedding sizes {sizes.min():.3g} to {sizes.max():.3g}; "
        f"seeds per (depth, budget) cell: {int(cells['n'].min())} to {int(cells['n'].max())}."
    )
    best = best_depth_table(cells)
    rows = [
        [
            _num(r.budget),
            str(r.depth),
            _num(r.width, ".0f"),
            _num(r.loss, ".4f"),
            _num(r.margin, ".4f"),
            str(r.seeds),
        ]
        for r in best.itertuples(index=False)
    ]
    headers = ["target budget", "best depth", "width", "loss", "margin to next depth", "seeds"]
    return [
        *lines,
        "",
        "Best depth at each budget (mean best validation loss over seeds):",
        "",
        _md_table(headers, rows),
        "",
    ]


def _transition_cells(row: pd.Series) -> list[str]:
    get = row.get
    if row["status"] == "bracketed":
        found = (
            f"N* = {_num(get('n_star'))} in [{_num(get('n_star_low'))}, {_num(get('n_star_high'))}]"
            f"; dx* = {_num(get('width_deep'), '.1f')} ± {_num(get('width_deep_err'), '.1f')}"
        )
    else:
        found = censored_pair(row).describe()
    counts = [str(int(get(k))) if pd.notna(get(k, math.nan)) else "–" for k in ("trials", "seeds")]
    return [str(row["pair"]), str(row["status"]), found, *counts]


def _transitions_section(study: Study) -> list[str]:
    lines = ["## Transitions (refine stage)", ""]
    if study.transitions is None or study.transitions.empty:
        return [*lines, "No transitions yet: the refine stage has not written any pair.", ""]
    frame = study.transitions
    counts = frame["status"].value_counts()
    summary = ", ".join(f"{v} {k}" for k, v in counts.items())
    rows = [_transition_cells(r) for _, r in frame.iterrows()]
    table = _md_table(["pair", "status", "found", "trials", "seeds"], rows)
    return [*lines, f"{len(frame)} depth pair(s): {summary}.", "", table, ""]


def _fit_lines(record: dict) -> list[str]:
    a_lo, a_hi = record["ci_a"]
    b_lo, b_hi = record["ci_b"]
    level = f"{record['level']:.0%}"
    rows = [
        [
            "a",
            f"{record['a']:.4f}",
            f"{record['se_a']:.4f}",
            f"[{a_lo:.4f}, {a_hi:.4f}]",
            f"{LEVINE2020.a}",
            f"{(LEVINE2020.a - record['a']) / record['se_a']:+.1f}",
        ],
        [
            "b",
            f"{record['b']:.5f}",
            f"{record['se_b']:.5f}",
            f"[{b_lo:.5f}, {b_hi:.5f}]",
            f"{LEVINE2020.b}",
            f"{(LEVINE2020.b - record['b']) / record['se_b']:+.1f}",
        ],
    ]
    headers = ["", "value", "std. error", f"{level} interval", "published", "published − fit (σ)"]
    return [
        f"ln dx* = a + b·L over {record['n_points']} bracketed transitions "
        f"(weighted least squares; errors from the transitions' uncertainties, not rescaled).",
        "",
        _md_table(headers, rows),
        "",
        f"cov(a, b) = {record['cov'][0][1]:.3g}; R² = {record['r2']:.4f}; "
        f"χ²_red = {record['chi2_red']:.3f} with {record['dof']} degrees of freedom "
        "(near 1: the uncertainties describe the scatter; well above 1: intervals too narrow).",
    ]


def _no_fit_lines(record: dict) -> list[str]:
    points, censored = record["points"], record["censored"]
    lines = [f"**No fit.** {record['reason']}", "", f"Found {len(points)} bracketed transition(s)"]
    lines[-1] += ":" if points else "."
    lines += [f"- {_point_line(p)}" for p in points]
    if censored:
        lines += ["", f"{len(censored)} pair(s) not bracketed:"]
        lines += [f"- pair {c['pair']}: {_describe(c)}" for c in censored]
    return lines


def _point_line(point: dict) -> str:
    seeds = f" ({point['seeds']} seeds)" if point.get("seeds") is not None else ""
    return (
        f"{point['label']}: depth {_num(point['depth'], 'g')}, "
        f"dx* = {_num(point['width'], '.1f')} ± {_num(point['width_err'], '.1f')}{seeds}"
    )


def _describe(censored: dict) -> str:
    nan = math.nan
    values = {k: (nan if v is None else v) for k, v in censored.items()}
    return CensoredPair(**values).describe()


def _fit_section(record: dict, outcome: FitOutcome) -> list[str]:
    lines = ["## Fit", ""]
    lines += _fit_lines(record) if record["status"] == "fitted" else _no_fit_lines(record)
    if record["status"] == "fitted" and outcome.law is None:
        lines += ["", f"**No projection from this fit:** {outcome.reason}."]
    return [*lines, ""]


def _row(rows: pd.DataFrame, law: str, query: str, column: str, value: float) -> pd.Series | None:
    match = rows[(rows["law"] == law) & (rows["query"] == query)]
    match = match[np.isclose(match[column], value, rtol=1e-12)]
    return match.iloc[0] if not match.empty else None


def _budget_cells(rows: pd.DataFrame, law: str | None, budget: float) -> list[str]:
    row = _row(rows, law, "budget", "n_params", budget) if law else None
    if row is None:
        return ["–", "–"]
    return [
        _span(row.depth, row.depth_lo, row.depth_hi, ".1f"),
        _span(row.width, row.width_lo, row.width_hi, ",.0f"),
    ]


BUDGET_HEADERS = [
    "budget N",
    "N / largest trained",
    "study L*",
    "study dx*",
    "Levine L*",
    "Levine dx*",
]


def _budget_table(study: Study, study_law: str | None, rows, budgets) -> str:
    """Optimal depth and width per budget, study beside reference, from the projection rows."""
    sizes = study.completed["params_non_embedding"].astype(float)
    largest = float(sizes.max()) if not sizes.empty else math.nan
    table = [
        [
            f"{format_size(n)} ({n:.3g})",
            _ratio(n / largest),
            *_budget_cells(rows, study_law, n),
            *_budget_cells(rows, LEVINE2020.name, n),
        ]
        for n in budgets
    ]
    return _md_table(BUDGET_HEADERS, table)


def _depth_table(outcome: FitOutcome, study_law: str | None, rows) -> str:
    """Transition size per depth (measured depths and GPT-3's 96), study beside reference."""
    table = []
    for depth in study_depths(outcome):
        ours = _row(rows, study_law, "depth", "depth", depth) if study_law else None
        ref = _row(rows, LEVINE2020.name, "depth", "depth", depth)
        mine = (
            "–" if ours is None else _span(ours.n_params, ours.n_params_lo, ours.n_params_hi, ".3g")
        )
        table.append([f"{depth:g}", mine, _num(ref.n_params)])
    return _md_table(["depth L", "study N*", "Levine N*"], table)


def _projection_section(study, outcome, rows, budgets) -> list[str]:
    study_law = outcome.law.name if outcome.law is not None else None
    return [
        "## Projection",
        "",
        "Optimal depth L* solves 12·L·exp(2(a + b·L)) = N; width dx* = exp(a + b·L*). "
        f"Brackets: {LEVEL:.0%} intervals from the fit covariance (inverting the band of "
        "ln N*(L); exact for Gaussian a, b; ')' marks an end the data leave open). "
        "The published fit has no covariance.",
        "",
        _budget_table(study, study_law, rows, budgets),
        "",
        "Transition size N*(L) = 12·L·exp(2(a + b·L)): below it, L layers are deeper than optimal.",
        "",
        _depth_table(outcome, study_law, rows),
        "",
    ]


def _figures_section(figures: tuple[Path, ...], exp_dir: Path) -> list[str]:
    captions = {
        "1_loss_vs_size.png": "Validation loss against non-embedding size, one line per depth.",
        "2_delta_per_pair.png": "Δ loss per depth pair against size; transitions marked.",
        "3_fit_width_vs_depth.png": "ln dx* against depth: transitions, fitted line and band.",
        "4_projection.png": "Projected optimal depth and width against budget up to 1e13.",
        "5_loss_curves.png": "Validation loss against training step, one line per trial.",
    }
    lines = ["## Figures", ""]
    for path in figures:
        rel = path.relative_to(exp_dir).as_posix()
        lines += [f"**{captions.get(path.name, path.name)}**", "", f"![{path.stem}]({rel})", ""]
    return lines


def _files_section(meta: dict, tb: Path | None) -> list[str]:
    board = f"`{TB_DIR.as_posix()}` (TensorBoard text + scalars)" if tb else "no TensorBoard"
    return [
        "## Files",
        "",
        f"`{FIT_FILE}`, `{PROJECTIONS_FILE}` (the records behind every number above), {board}.",
        f"Git revision {meta.get(GIT_KEY, 'unknown')}; package versions in the Parquet metadata.",
        "",
    ]


=======
>>>>>>> main
# ---------------------------------------------------------------- TensorBoard


def write_tensorboard(exp_dir: Path, record: dict, fit_text: str) -> Path | None:
    """The fit as text and scalars under ``<exp_dir>/tb/fit`` (replacing earlier events)."""
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        return None
    folder = exp_dir / TB_FIT
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("events.out.tfevents.*"):
        old.unlink()  # one summary per report, not a history of reruns
    with SummaryWriter(logdir=str(folder)) as writer:
        writer.add_text("fit/summary", fit_text, 0)
        if record["status"] == "fitted":
            for key in ("a", "b", "se_a", "se_b", "r2", "chi2_red", "dof", "n_points"):
                writer.add_scalar(f"fit/{key}", float(record[key]), 0)
    return folder


def write_report(exp_dir: str | Path) -> ReportFiles:
    """report.md, figures/ and tb/fit for an experiment whose fit stage has run."""
    study = load_study(exp_dir)
    budgets, budget_note = table_budgets(study)
    if budget_note:
        study = dataclasses.replace(study, notes=(*study.notes, budget_note))
    cells = cell_table(study.completed)
<<<<<<< HEAD
    outcome = fit_study(study)
    rows = projection_rows(study, outcome, budgets)
    # The records first: everything below (figures, TensorBoard, markdown) is drawn from them.
    record = fit_record(study, outcome, metadata_json(study.spec))
    fit_json = write_json_atomic(study.exp_dir / FIT_FILE, record)
    projections = write_projections(
        study.exp_dir / PROJECTIONS_FILE, rows.to_dict("records"), study.spec
    )
    figures = plot_best_lr(study.exp_dir, draw_figures(study, outcome, rows, cells))
=======
    outcome, rows, record = load_fit(study)
    figures = draw_figures(study, outcome, rows, cells)
>>>>>>> main
    fit_text = "\n".join(_header(study)[:3] + _fit_section(record, outcome))
    tb = write_tensorboard(study.exp_dir, record, fit_text)
    report = study.exp_dir / REPORT_FILE
    atomic_write_text(report, _markdown(study, outcome, cells, rows, budgets, record, figures, tb))
    projections = study.exp_dir / PROJECTIONS_FILE
    return ReportFiles(report, study.exp_dir / FIT_FILE, projections, figures, tb)
