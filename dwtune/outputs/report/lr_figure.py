"""The report's learning-rate figure: the best rate a per-shape search found, against width,
one line per depth (log-log), from the trials the store read (the rate each grid and refine
trial trained with, where its source is a search or an interpolation of searches).

Under standard parametrisation the best Adam rate is expected to fall roughly as 1/width;
under μP to stay flat. The slope per depth is printed in the legend. Nothing is drawn for a
study whose rate was not searched.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from dwtune.core import vocabulary
from dwtune.core.lr_search import ln_slope
from dwtune.core.vocabulary import FIGURES_DIR, SIMULATED_TITLE, Figure
from dwtune.outputs.report.figures import save_png
from dwtune.storage.experiment import Experiment

SEARCHED = (vocabulary.LR_SOURCE_SEARCH, vocabulary.LR_SOURCE_INTERPOLATED)


def best_rates(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per (depth, width, lr_source): the rate its trials trained with."""
    if "lr_source" not in trials.columns:
        return pd.DataFrame(columns=["depth", "width", "lr", "lr_source"])
    used = trials[trials.lr_source.isin(SEARCHED) & (trials.stage != vocabulary.Stage.LR_SEARCH)]
    return used.groupby(["depth", "width", "lr_source"], as_index=False)["lr"].first()


def plot_best_lr(experiment: Experiment, figures: tuple[Path, ...]) -> tuple[Path, ...]:
    """``figures`` plus the best-rate figure when the study searched rates."""
    rates = best_rates(experiment.trials)
    if rates.empty:
        return figures
    simulated = experiment.simulated
    fig, ax = plt.subplots(figsize=(6, 4))
    for depth, rows in rates.groupby("depth"):
        rows = rows.sort_values("width")
        searched = rows[rows.lr_source == vocabulary.LR_SOURCE_SEARCH]
        slope = ln_slope(searched.width, searched.lr) if len(searched) > 1 else float("nan")
        line = ax.plot(searched.width, searched.lr, marker="o", label=f"L={depth} ({slope:+.2f})")
        other = rows[rows.lr_source == vocabulary.LR_SOURCE_INTERPOLATED]
        ax.plot(other.width, other.lr, "x", color=line[0].get_color())
    ax.set(xscale="log", yscale="log", xlabel="width", ylabel="best learning rate")
    title = "Best rate per shape (o searched, x interpolated)"
    ax.set_title(SIMULATED_TITLE.format(title) if simulated else title)
    ax.legend(fontsize=7, title="depth (ln-ln slope)")
    out = experiment.root / FIGURES_DIR / Figure.BEST_LR
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    save_png(fig, out)  # atomic: a link planted at its name is replaced, never written through
    plt.close(fig)
    return (*figures, out)
