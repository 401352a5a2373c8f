"""Generated W&B-style sweep exports with a planted transition, for `dwtune analyze` tests.

SYNTHETIC DATA: losses follow a documented formula, not a model. Columns as a W&B export names
them: ``n_layer``, ``d_model``, ``n_params`` (12·L·d², widths rounded to multiples of 8, so two
depths at one budget differ in size by a few percent), ``seed``, ``tokens``, ``val_loss``.

    val_loss(L, N, seed, t) = (N_C / N)^ALPHA + D(L, ln N, t) + late(t) + noise

with ``D`` summing, over the planted pairs up to depth L, ``GAP·tanh((ln N*_j − ln N)/SCALE)``
(so Δ of an adjacent pair at equal N is exactly that pair's tanh, zero at its N*) and
``late(t) = 0.3·(1 − t/T)`` at checkpoint t of T tokens. The N* of the checkpoints before the
last are ``early_factor`` times the final ones, so picking the wrong checkpoint moves N*.

Run as a script to write one: ``python tests/commands/analysis_tables.py sweep.csv``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

N_C, ALPHA = 8.8e13, 0.076
GAP, SCALE = 0.05, 0.5
TOKENS = 2_000_000_000
CHECKPOINTS = (0.25, 0.5, 1.0)  # shares of TOKENS at which each run logged val_loss


def rounded_width(depth: int, budget: float, multiple: int = 8) -> int:
    return max(multiple, round((budget / (12 * depth)) ** 0.5 / multiple) * multiple)


def sweep(
    depths=(6, 12),
    n_stars=(2e7,),
    budgets=None,
    seeds=(0, 1, 2),
    noise=0.002,
    checkpoints=CHECKPOINTS,
    early_factor=3.0,
    rng_seed=0,
) -> pd.DataFrame:
    """One row per run and checkpoint, rows shuffled; ``n_stars[j]`` is planted for the pair
    ``(depths[j], depths[j + 1])``."""
    budgets = np.geomspace(1e6, 1e9, 13) if budgets is None else budgets
    rng = np.random.default_rng(rng_seed)
    seed_effect = {s: rng.standard_normal() for s in seeds}
    rows = []
    for k, depth in enumerate(depths):
        for budget in budgets:
            width = rounded_width(depth, budget)
            n = 12 * depth * width**2
            for seed in seeds:
                own = rng.standard_normal()
                eps = noise * (np.sqrt(0.5) * seed_effect[seed] + np.sqrt(0.5) * own)
                for share in checkpoints:
                    stars = np.asarray(n_stars[:k], dtype=float)
                    stars = stars if share == 1.0 else stars * early_factor
                    links = GAP * np.tanh((np.log(stars) - np.log(n)) / SCALE)
                    loss = (N_C / n) ** ALPHA + links.sum() + 0.3 * (1 - share) + eps
                    rows.append((depth, width, n, seed, int(share * TOKENS), float(loss)))
    frame = pd.DataFrame(
        rows, columns=["n_layer", "d_model", "n_params", "seed", "tokens", "val_loss"]
    )
    return frame.sample(frac=1.0, random_state=rng_seed).reset_index(drop=True)


WANDB_COLUMNS = "depth=n_layer,width=d_model,params=n_params,loss=val_loss"


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "sweep.csv")
    sweep(depths=(6, 12, 18), n_stars=(2e7, 8e7)).to_csv(out, index=False)
    print(out)
