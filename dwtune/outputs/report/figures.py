"""The report's five figures, drawn from what the store read (nothing is computed here beyond
the per-cell means of :mod:`.cells`).

Figures use matplotlib's object API on the Agg canvas (no pyplot, no global backend switch), so
importing this module changes nothing for anyone else in the process.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

from dwtune.core import vocabulary
from dwtune.core.fit import FitResult
from dwtune.core.projection import LEVINE2020
from dwtune.core.vocabulary import (
    FIGURES_DIR,
    LEVEL,
    SIMULATED_LABEL,
    SIMULATED_TITLE,
    TransitionStatus,
)
from dwtune.outputs.report.cells import delta_table, depth_pairs
from dwtune.storage.experiment import Experiment
from dwtune.storage.fit_json import FitOutcome
from dwtune.storage.fit_points import FitInput, censored_pair
from dwtune.storage.schemas import CURVE_MAX, GPT3
from dwtune.storage.store import atomic_write_bytes

# ---------------------------------------------------------------- figures


def new_figure(width: float, height: float, simulated: bool) -> Figure:
    """A figure (inches) on the Agg canvas; simulated data get the red SIMULATED watermark."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    if simulated:
        fig.text(
            0.5,
            0.5,
            SIMULATED_LABEL,
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


def _new_figure(width: float, height: float, experiment: Experiment) -> Figure:
    return new_figure(width, height, experiment.simulated)


def _title(fig: Figure, experiment: Experiment, text: str) -> None:
    if experiment.simulated:
        text = SIMULATED_TITLE.format(text)
    fig.suptitle(text, color="red" if experiment.simulated else "black", fontsize=12)


def figure_title(fig: Figure) -> str:
    """The figure's title (its suptitle, else its axes' titles joined)."""
    return fig.get_suptitle() or " | ".join(ax.get_title() for ax in fig.axes if ax.get_title())


def save_png(fig: Figure, path: Path) -> Path:
    """The figure as a PNG at ``path``, written atomically; its title is also the PNG's
    ``Title`` text chunk (a SIMULATED figure says so to any image tool, not only in pixels)."""
    buffer = io.BytesIO()
    metadata = {"Title": figure_title(fig), "Software": "dwtune"}
    fig.savefig(buffer, format="png", dpi=120, metadata=metadata)
    atomic_write_bytes(path, buffer.getvalue())
    return path


def _depth_colors(depths: list[int]) -> dict[int, tuple]:
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    span = max(len(depths) - 1, 1)
    return {d: cmap(0.9 * i / span) for i, d in enumerate(sorted(depths))}


def plot_loss_vs_size(experiment: Experiment, cells: pd.DataFrame, path: Path) -> Path:
    """Figure 1: best validation loss against non-embedding size, one line per depth."""
    fig = _new_figure(7.5, 5, experiment)
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
    _title(
        fig,
        experiment,
        f"{experiment.name}: validation loss vs size per depth (bars: sd over seeds)",
    )
    return save_png(fig, path)


def plot_loss_curves(
    experiment: Experiment, curves: pd.DataFrame | None, path: Path
) -> Path | None:
    """Figure 5: validation loss against training step of the grid trials, one panel per
    depth (shared axes), one line per trial coloured by its size.

    Grid trials only: the refine stage's many sizes near N* would bury every panel. Drawn from
    curves.parquet (absent before the first export: then no figure)."""
    trials = experiment.trials
    if curves is None or trials.empty or "trial_id" not in trials:
        return None
    if "stage" in trials.columns:
        trials = trials[trials["stage"] == vocabulary.Stage.GRID]
    columns = ["trial_id", "depth", "params_non_embedding"]
    curves = curves.dropna(subset=["val_loss"]).merge(trials[columns], on="trial_id")
    if curves.empty:
        return None
    depths = sorted(int(d) for d in curves["depth"].unique())
    cols = min(len(depths), 4)
    rows = math.ceil(len(depths) / cols)
    fig = _new_figure(3.2 * cols + 1.0, 2.8 * rows + 0.8, experiment)
    axes = np.atleast_1d(fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)).ravel()
    sizes = np.log10(curves["params_non_embedding"].astype(float))
    norm = _size_norm(float(sizes.min()), float(sizes.max()))
    cmap = colormaps["viridis"]
    for ax, depth in zip(axes, depths, strict=False):
        for _, trial in curves[curves["depth"] == depth].groupby("trial_id"):
            color = cmap(norm(math.log10(float(trial["params_non_embedding"].iloc[0]))))
            ax.plot(trial["step"], trial["val_loss"], color=color, lw=1, alpha=0.8)
        ax.set_title(f"L = {depth}", fontsize=9)
        ax.grid(True, alpha=0.3)
    for ax in axes[len(depths) :]:
        ax.set_visible(False)
    for ax in axes[(rows - 1) * cols :]:
        ax.set_xlabel("training step")
    for ax in axes[::cols]:
        ax.set_ylabel("validation loss (nats/token)")
    bar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=list(axes[: len(depths)]))
    bar.set_label("log10 non-embedding parameters")
    _title(fig, experiment, f"{experiment.name}: grid trials' validation loss curves per depth")
    return save_png(fig, path)


def _size_norm(low: float, high: float) -> Normalize:
    return Normalize(low, high if high > low else low + 1.0)


def _transition_row(experiment: Experiment, label: str) -> pd.Series | None:
    if experiment.transitions is None:
        return None
    rows = experiment.transitions[experiment.transitions["pair"].astype(str) == label]
    return rows.iloc[0] if not rows.empty else None


def _mark_transition(ax, row: pd.Series | None) -> str:
    """Draw what the refine stage found for this pair; return a short caption."""
    if row is None:
        return "no refine result"
    status = str(row["status"])
    if status == TransitionStatus.BRACKETED:
        lo, hi, n = (float(row.get(c, math.nan)) for c in ("n_star_low", "n_star_high", "n_star"))
        # The 95% interval is often a sliver of a log axis spanning decades: its edges are
        # drawn as lines too, and the N* line is thin, so the band is never hidden under it.
        if math.isfinite(lo) and math.isfinite(hi):
            ax.axvspan(lo, hi, color="tab:red", alpha=0.3, lw=0, label="N* 95% interval")
            for edge in (lo, hi):
                ax.axvline(edge, color="tab:red", lw=0.8, ls=":")
        if math.isfinite(n):
            ax.axvline(n, color="tab:red", lw=0.8, label=f"N* = {n:.3g}")
        return f"bracketed, N* = {n:.3g}"
    pair = censored_pair(row)
    if math.isfinite(pair.bound):
        side = ">" if pair.direction == +1 else "<"  # an undecided pair's bound has a side too
        ax.axvline(pair.bound, color="tab:orange", ls="--", label=f"N* {side} {pair.bound:.3g}")
    return status.replace("_", " ")


def _seeds_of(row: pd.Series | None) -> str:
    if row is None or "seeds" not in row.index or pd.isna(row["seeds"]):
        return ""
    return f", {int(row['seeds'])} seed(s)"


def plot_deltas(experiment: Experiment, cells: pd.DataFrame, pairs: list, path: Path) -> Path:
    """Figure 2: Δ loss (deeper − shallower) against size per pair, transitions marked."""
    ncols = min(3, max(len(pairs), 1))
    nrows = max(math.ceil(len(pairs) / ncols), 1)
    # At least 7.5 inches wide so the title fits above a single pair.
    fig = _new_figure(max(4.6 * ncols, 7.5), 3.4 * nrows + 0.6, experiment)
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
        row = _transition_row(experiment, label)
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
    _title(
        fig, experiment, f"{experiment.name}: Δ loss per depth pair (below 0: the deeper net wins)"
    )
    return save_png(fig, path)


def _censored_bounds(outcome: FitOutcome) -> list[tuple[int, float, str]]:
    """(depth, ln dx bound, status) for censored pairs: N* bound -> dx = sqrt(N/(12·L))."""
    pairs = outcome.points.censored if outcome.points is not None else ()
    return [
        (c.depth_deep, 0.5 * math.log(c.bound / (12.0 * c.depth_deep)), c.status)
        for c in pairs
        if math.isfinite(c.bound)
    ]


def _draw_fit_line(ax, fit: FitResult, depths: np.ndarray) -> None:
    line, se = fit.line(depths)
    half = fit.quantile(LEVEL) * se
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
        marker = "^" if status == TransitionStatus.CENSORED_HIGH else "v"
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


def plot_fit(experiment: Experiment, outcome: FitOutcome, path: Path) -> Path | None:
    """Figure 3: ln dx* against depth with error bars, fitted line and band, reference line."""
    points, bounds = outcome.points, _censored_bounds(outcome)
    if (points is None or not points.depths) and not bounds:
        return None
    fig = _new_figure(7.5, 5, experiment)
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
    _title(fig, experiment, f"{experiment.name}: transition width vs depth, ln dx* = a + b·L")
    return save_png(fig, path)


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


def _measured_span(experiment: Experiment, axes) -> None:
    sizes = experiment.completed["params_non_embedding"].astype(float)
    if sizes.empty:
        return
    for ax in axes:
        ax.axvspan(sizes.min(), sizes.max(), color="tab:green", alpha=0.1, label="sizes trained")


def plot_projection(
    experiment: Experiment, outcome: FitOutcome, rows: pd.DataFrame, path: Path
) -> Path:
    """Figure 4: optimal depth and width against budget up to 1e13, study and reference."""
    fig = _new_figure(12, 5, experiment)
    axes = fig.subplots(1, 2)
    _measured_span(experiment, axes)
    reference_rows = rows[rows["law"] == LEVINE2020.name]
    # The published line is drawn over the study's fit (which often lies on it), dashed and
    # darker, so both stay visible where they coincide.
    ref_style = {
        "color": "black",
        "ls": (0, (4, 3)),
        "lw": 1.4,
        "zorder": 4,
        "label": "Levine et al. 2020 (published a, b)",
    }
    _plot_law(axes, reference_rows, LEVINE2020.name, ref_style)
    if outcome.law is not None:
        study_style = {"color": "tab:blue", "lw": 3, "alpha": 0.7, "label": "this study's fit"}
        _plot_law(axes, rows, outcome.law.name, study_style)
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
    _title(fig, experiment, f"{experiment.name}: projected optimal shape vs budget (12·L·dx² = N)")
    return save_png(fig, path)


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


def draw_figures(
    experiment: Experiment,
    outcome: FitOutcome,
    rows: pd.DataFrame,
    cells: pd.DataFrame,
    curves: pd.DataFrame | None,
) -> tuple[Path, ...]:
    folder = experiment.root / FIGURES_DIR
    pairs = depth_pairs(experiment, cells)
    paths = [
        plot_loss_vs_size(experiment, cells, folder / vocabulary.Figure.LOSS_VS_SIZE),
        plot_deltas(experiment, cells, pairs, folder / vocabulary.Figure.DELTA_PER_PAIR),
        plot_fit(experiment, outcome, folder / vocabulary.Figure.FIT),
        plot_projection(experiment, outcome, rows, folder / vocabulary.Figure.PROJECTION),
        plot_loss_curves(experiment, curves, folder / vocabulary.Figure.LOSS_CURVES),
    ]
    return tuple(p for p in paths if p is not None)
