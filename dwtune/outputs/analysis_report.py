"""`dwtune analyze --report DIR`: report.md and a figure of Δ per pair against size.

Drawn from the same :class:`~dwtune.core.analysis.result.AnalysisResult` the console text and
``--json`` render, so the report never disagrees with them. Like a
study's report (:mod:`dwtune.outputs.report`): matplotlib's object API on the Agg canvas (no
pyplot), atomic writes, a SIMULATED watermark and banner on simulated data.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from dwtune.core.analysis.result import AnalysedPair, AnalysisResult
from dwtune.core.vocabulary import (
    FIGURES_DIR,
    REPORT_FILE,
    SIMULATED_BANNER,
    SIMULATED_TITLE,
    Figure,
)
from dwtune.outputs.analysis_text import (
    fit_lines,
    n_star_text,
    noise_lines,
    pair_lines,
    reference_law,
    warning_lines,
)
from dwtune.outputs.report.figures import new_figure, save_png
from dwtune.storage.store import atomic_write_text

COLUMNS = 3


def _finite(values) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def _draw_pair(ax, held: AnalysedPair, law: str | None) -> None:
    """Δ ± se against N (log axis); the estimate's N* and 95% band; the law's N* dashed."""
    pair, est = held.analysis, held.analysis.estimate
    n = _finite(m.point.n for m in pair.points)
    delta = _finite(pair.delta)
    err = _finite(pair.delta_err)
    ax.axhline(0.0, color="black", lw=0.8)
    ax.errorbar(
        n,
        delta,
        yerr=np.nan_to_num(err),
        marker="o",
        ms=4,
        capsize=2,
        color="tab:blue",
        label="Δ ± se",
    )
    if est.n_star is not None and math.isfinite(est.n_star):
        ax.axvspan(
            est.n_star_low,
            est.n_star_high,
            color="tab:green",
            alpha=0.2,
            label="N* 95% interval",
        )
        ax.axvline(est.n_star, color="tab:green", lw=1.2, label="N* (estimate)")
    if law is not None and held.view is not None and math.isfinite(held.view.n_star):
        ax.axvline(held.view.n_star, color="tab:red", ls="--", lw=1.2, label=f"N* ({law})")
    spread = np.nanmax(np.abs(delta)) if np.isfinite(delta).any() else 1.0
    ax.set_ylim(-1.6 * spread, 1.6 * spread)  # a huge se at one point must not flatten the rest
    ax.set_xscale("log")
    ax.set_title(
        f"depth {pair.depth_deep:g} − depth {pair.depth_shallow:g}: "
        f"{pair.status.replace('_', ' ')}",
        fontsize=9,
    )
    ax.set_xlabel("size N (as the table counts it)")
    ax.set_ylabel("Δ loss (deeper − shallower)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def plot_pair_deltas(analysis: AnalysisResult, path: Path) -> Path:
    """One panel per pair (below 0: the deeper net wins)."""
    pairs, simulated = analysis.pairs, analysis.simulated
    ncols = min(COLUMNS, max(len(pairs), 1))
    nrows = max(math.ceil(len(pairs) / ncols), 1)
    fig = new_figure(max(4.6 * ncols, 7.5), 3.4 * nrows + 0.6, simulated)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False).ravel())
    for ax, pair in zip(axes, pairs, strict=False):
        _draw_pair(ax, pair, reference_law(analysis))
    for ax in axes[len(pairs) :]:
        ax.set_axis_off()
    title = f"{Path(analysis.source).name}: Δ loss per depth pair"
    if simulated:
        title = SIMULATED_TITLE.format(title)
    fig.suptitle(title, color="red" if simulated else "black", fontsize=12)
    return save_png(fig, path)


def markdown(analysis: AnalysisResult, figure: Path, out: Path) -> str:
    ref, law = analysis.reference, reference_law(analysis)
    lines = [f"# Transition analysis of {analysis.source}", ""]
    if analysis.simulated:
        lines += [f"**{SIMULATED_BANNER}**", ""]
    lines += [
        f"- checkpoints: {analysis.checkpoints.describe()}",
        f"- window: |ln N_deep − ln N_shallow| ≤ {analysis.window:.3g}",
        "- Δ = loss(deeper) − loss(shallower) at the deeper net's size; N* estimated as the "
        "refine stage estimates it (docs/statistics.md)",
    ]
    if ref:
        a, b = ref.reference.law.a, ref.reference.law.b
        lines += [f"- reference: {law} (a = {a}, b = {b}): {ref.test.summary}"]
    lines += ["", "## Noise and signs", "", "```", *noise_lines(analysis), "```", ""]
    warnings = warning_lines(analysis)
    if warnings:
        lines += ["## Warnings and skipped pairs", "", *[f"- {w}" for w in warnings], ""]
    lines += ["## Pairs", ""]
    for pair in analysis.pairs:
        lines += [f"### Pair {pair.analysis.label}", "", n_star_text(pair), "", "```"]
        lines += [*pair_lines(pair, law)[1:], "```", ""]
    lines += ["## Fit", "", "```", *fit_lines(analysis.fit), "```", ""]
    lines += ["## Figures", "", f"![Δ per pair]({figure.relative_to(out).as_posix()})", ""]
    lines += [
        "What this cannot show: the sizes are the table's own count (compared with a law's "
        "N* = 12·L·dx² only if the table counts the same way); a transition outside the sizes "
        "the table covers is only bounded; runs that differ in more than shape (learning rate, "
        "tokens) confound Δ; noise from checkpoint jitter is one run's evaluation and "
        "optimisation noise, not seed-to-seed variation.",
        "",
    ]
    return "\n".join(lines)


def write_analysis_report(analysis: AnalysisResult, out_dir: str | Path) -> tuple[Path, ...]:
    """report.md and figures/``Figure.ANALYSIS_DELTAS`` under ``out_dir``; returns their paths."""
    out = Path(out_dir)
    figure = plot_pair_deltas(analysis, out / FIGURES_DIR / Figure.ANALYSIS_DELTAS)
    report = out / REPORT_FILE
    atomic_write_text(report, markdown(analysis, figure, out))
    return report, figure
