"""The report's per-cell tables, computed from the trials the store read: one row per (depth,
budget) with the loss mean and sd over seeds, Δ per pair, the best depth per budget."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd

from dwtune.storage.experiment import Experiment


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


def depth_pairs(experiment: Experiment, cells: pd.DataFrame) -> list[tuple[str, int, int]]:
    """(label, shallow, deep): the transitions' pairs, else neighbouring depths of the grid."""
    if experiment.transitions is not None and not experiment.transitions.empty:
        rows = experiment.transitions.drop_duplicates("pair")
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
    """At each budget where every depth trained, the depth with the lowest mean loss and its
    margin over the runner-up. A refine point trains only its pair's two depths: its "best
    depth" would be the better of two, not of the study's depths."""
    rows = []
    depths = cells["depth"].nunique()
    for budget, group in cells.groupby("budget"):
        if group["depth"].nunique() < depths:
            continue
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
