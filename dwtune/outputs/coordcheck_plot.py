"""The coordinate check's figure: RMS of each layer against width, one panel per
parametrisation (log-log; a flat line is width-stable)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def plot_coordcheck(summary: dict, widths: list[int], path: Path) -> Path:
    """Draw ``summary`` (dwtune.commands.coordcheck.summary) at its first depth to ``path``."""
    names = list(summary)
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        first = min(summary[name]["layers"], key=int)
        by_width = summary[name]["layers"][first]
        for layer in by_width[str(widths[0])]:
            ax.plot(widths, [by_width[str(w)][layer] for w in widths], marker="o", label=layer)
        ax.set(xscale="log", yscale="log", xlabel="width", ylabel="activation RMS")
        ax.set_title(f"{name}, depth {first}: slope {summary[name]['width_slope']:+.2f}")
        ax.legend(fontsize=6)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
