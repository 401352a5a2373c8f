"""Generated W&B-style sweep exports with a planted transition, for `dwtune analyze` tests.

SYNTHETIC DATA: losses follow a documented formula, not a model. Columns as a W&B export names
them: ``n_layer``, ``d_model``, ``n_params`` (12·L·d², widths rounded to multiples of 8, so two
depths at one budget differ in size by a few percent), ``seed``, ``tokens``, ``val_loss``.

    val_loss(L, N, seed, t) = (N_C / N)^ALPHA + D(L, ln N, t) + late(t) + noise

with ``D`` summing, over the planted pairs up to depth L, ``GAP·tanh((ln N*_j − ln N)/SCALE)``
(so Δ of an adjacent pair at equal N is exactly that pair's tanh, zero at its N*) and
``late(t) = 0.3·(1 − t/T)`` at checkpoint t of T tokens. The N* of the checkpoints before the
last are ``early_factor`` times the final ones, so picking the wrong checkpoint moves N*.

Run as a script to write one: ``python tests/helpers/analysis_tables.py sweep.csv``.
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


# --------------------------------------------------------------------------- one run per shape

SUITE_TOKENS = 2_000_000_000
SUITE_CHECKPOINTS = 20  # evaluations per run, evenly spaced in tokens up to its end
CURVE_SCALE, CURVE_POWER = 0.1, 0.5  # nats above the final loss: 0.1·((T/t)^0.5 − 1)
SUITE_COLUMNS = ["run", "depth", "width", "params", "tokens", "loss"]


def run_curve(final: float, end_tokens: float) -> tuple[np.ndarray, np.ndarray]:
    """Checkpoint tokens and noise-free losses of a run: ``final`` at SUITE_TOKENS on a
    smooth curve in tokens; a run that stops early (``end_tokens`` < SUITE_TOKENS) ends
    higher on the same curve."""
    tokens = np.linspace(end_tokens / SUITE_CHECKPOINTS, end_tokens, SUITE_CHECKPOINTS)
    return tokens, final + CURVE_SCALE * ((SUITE_TOKENS / tokens) ** CURVE_POWER - 1.0)


def single_run_suite(
    depths=(6, 12, 18, 24),
    budgets=None,
    *,
    a: float = 5.039,
    b: float = 0.0555,
    jitter=0.002,
    seed_sd: float = 0.0,
    short: dict | None = None,
    far_depths: dict | None = None,
    spike: tuple | None = None,
    rng_seed: int = 0,
) -> pd.DataFrame:
    """A suite of one run per shape with SUITE_CHECKPOINTS checkpoints each, its final losses
    from the simulated backend's surface (:mod:`dwtune.backends.simulated`, pairs chained
    6-12-18-24 as a study plants them, law ``ln dx* = a + b·L``; the defaults are levine2020's).

    SIMULATED DATA. ``jitter``: sd (nats) of every checkpoint's independent evaluation noise
    about the run's curve (a number, or depth -> sd). ``seed_sd``: sd of one offset per run
    (seed-to-seed noise, which no checkpoint can see; 0: the world where jitter is all the
    noise). ``short``: (depth, budget index) -> share of SUITE_TOKENS the run stops at.
    ``far_depths``: depth -> its own budgets (e.g. sizes no other depth was trained at).
    ``spike``: (depth, budget index, nats) added to that run's checkpoints in its last quarter
    except the last (a loss spike it recovered from)."""
    from dwtune.backends.simulated_surface import mean_loss_at
    from dwtune.core.spec.sections import SimulatedConfig

    config = SimulatedConfig(a=a, b=b)
    budgets = np.geomspace(1e6, 1e9, 13) if budgets is None else budgets
    plan = {d: budgets for d in depths} | (far_depths or {})
    chain = sorted(plan)
    rng = np.random.default_rng(rng_seed)
    rows = []
    for depth in chain:
        linked = tuple(d for d in chain if chain[0] < d <= depth)
        sd = jitter.get(depth) if isinstance(jitter, dict) else jitter
        for k, budget in enumerate(plan[depth]):
            width = rounded_width(depth, budget)
            offset = seed_sd * rng.standard_normal()  # a seed's effect: the whole run moves
            final = mean_loss_at(config, linked, depth, width, None) + offset
            end = (short or {}).get((depth, k), 1.0) * SUITE_TOKENS
            tokens, losses = run_curve(final, end)
            losses = losses + sd * rng.standard_normal(losses.size)
            if spike is not None and spike[:2] == (depth, k):
                losses[-SUITE_CHECKPOINTS // 4 : -1] += spike[2]
            name = f"L{depth}-w{width}"
            n = 12 * depth * width**2
            pairs = zip(tokens, losses, strict=True)
            rows += [(name, depth, width, n, int(t), float(v)) for t, v in pairs]
    return pd.DataFrame(rows, columns=SUITE_COLUMNS)


# --------------------------------------------------------------------------- no exact replicates


def scattered_sweep(
    depths=(6, 12, 18, 24),
    budgets=None,
    seeds=(0, 1, 2),
    *,
    a: float = 5.039,
    b: float = 0.0555,
    noise: float = 0.002,
    scatter: float = 0.08,
    dip: tuple | None = None,
    rng_seed: int = 0,
) -> pd.DataFrame:
    """Final losses only (no tokens, no run column), one row per seed, each seed's run at its
    own size: the budget times ``e^(scatter·s)`` with ``s`` spread evenly over −1..1 by seed
    and jittered by ±0.25, the width rounded to a whole
    number, so no two runs of a depth share a size (as runs gathered from elsewhere rarely do).
    Losses from the simulated surface chained 6-12-18-24 (law ``ln dx* = a + b·L``) plus
    ``noise`` (nats, independent per run). ``dip``: (pair index, e-folds below its N*, nats)
    adds a second dip of that depth (a Δ that crosses three times).

    SIMULATED DATA."""
    from dwtune.backends.simulated_surface import mean_loss_at, planted_transition
    from dwtune.core.spec.sections import SimulatedConfig

    config = SimulatedConfig(a=a, b=b)
    budgets = np.geomspace(1e6, 1e9, 13) if budgets is None else budgets
    rng = np.random.default_rng(rng_seed)
    rows = []
    for depth in depths:
        linked = tuple(d for d in depths if depths[0] < d <= depth)
        for budget in budgets:
            for k, seed in enumerate(seeds):  # seeds spread over ±scatter, jittered by a quarter
                spread = 2.0 * k / max(len(seeds) - 1, 1) - 1.0 + rng.uniform(-0.25, 0.25)
                size = budget * np.exp(scatter * spread)
                width = rounded_width(depth, size, multiple=1)
                n = 12 * depth * width**2
                loss = mean_loss_at(config, linked, depth, width, None)
                if dip is not None and depth >= depths[dip[0] + 1]:
                    centre = np.log(planted_transition(config, depths[dip[0] + 1])) - dip[1]
                    loss -= dip[2] * np.exp(-0.5 * ((np.log(n) - centre) / 0.25) ** 2)
                rows.append((depth, width, n, seed, float(loss + noise * rng.standard_normal())))
    return pd.DataFrame(rows, columns=["n_layer", "d_model", "n_params", "seed", "val_loss"])
