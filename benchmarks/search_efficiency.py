"""Search efficiency of the refine stage against a paper-style dense grid, in simulation.

SIMULATED DATA (dwtune.backends.simulated). For
several planted laws ``ln dx* = a + b·L`` (the published
a = 5.039, b = 0.0555, each perturbed) at the paper's noise level (losses "stable to the third
digit": sd 0.002 per run), on the depths and pairs of ``search_spaces/simulated.yaml``:

- dwtune: the spec's coarse grid (one seed) then the refine stage, run for real through
  :class:`dwtune.study.refine.RefineStage` with the in-process runner (no Ray); counted: every
  training of both stages. Its error: the largest ``|ln(N*_found / N*_planted)|`` over all
  pairs and laws.
- dense grid, the paper's style: K log-spaced sizes per depth over the same range, 3 reruns
  each, ``N*`` taken between the two sizes where the 3-seed mean Δ turns negative (the same
  geometric midpoint the refine stage reports; Δ at equal N like the refine stage). The
  smallest K whose largest error is within the target is found by scanning K upwards.

Prints both costs and their ratio (dwtune / dense). Also printed, for honesty: the dense grid
with its crossing interpolated linearly between the two sizes, a stronger estimator than a
bracket's midpoint. On this surface Δ is nearly linear in ln N near N* and far above the noise,
so interpolation needs few sizes; dwtune reports the bracket's midpoint and does not
interpolate. Run: ``python benchmarks/search_efficiency.py`` (about 15 s on 2 cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import tempfile
import time
from pathlib import Path

import numpy as np

from dwtune.backends.simulated import final_loss, planted_transition
from dwtune.core.records import TrialRecord, grid_requests
from dwtune.core.refine.first_points import pair_start
from dwtune.core.spec import ExperimentSpec, load_spec
from dwtune.storage.store import ExperimentStore
from dwtune.study.refine import RefineStage
from dwtune.study.runners.local import LocalRunner

SPEC = Path(__file__).resolve().parent.parent / "search_spaces" / "simulated.yaml"
DENSE_SEEDS = (0, 1, 2)  # the paper's 3 reruns per point


def planted_specs(base: ExperimentSpec, count: int, noise: float, seed: int) -> list:
    """``count`` specs whose planted law is the published one, perturbed."""
    rng = random.Random(seed)
    specs = []
    for _ in range(count):
        simulated = dataclasses.replace(
            base.simulated,
            noise=noise,
            a=base.simulated.a + rng.uniform(-0.3, 0.3),
            b=base.simulated.b + rng.uniform(-0.005, 0.005),
        )
        specs.append(dataclasses.replace(base, simulated=simulated))
    return specs


def log_error(spec: ExperimentSpec, depth_deep: int, n_star: float) -> float:
    return abs(math.log(n_star / planted_transition(spec.simulated, depth_deep)))


# --------------------------------------------------------------------------- dwtune


def run_dwtune(spec: ExperimentSpec, root: Path) -> tuple[int, float]:
    """(trainings of grid + refine, largest N* error) of the real stages on one law."""
    store = ExperimentStore.for_spec(root, spec)
    store.initialise(spec)
    runner = LocalRunner(spec, store)
    runner.run(grid_requests(spec))
    transitions = RefineStage(spec, store).run(runner.run)
    errors = [
        log_error(spec, t.depth_deep, t.n_star) if t.status == "bracketed" else math.inf
        for t in transitions
    ]
    return runner.trained, max(errors)


# --------------------------------------------------------------------------- dense grid


def dense_records(spec: ExperimentSpec, budgets: np.ndarray) -> list[TrialRecord]:
    """The simulated final losses of every depth x size x rerun, as grid records."""
    records = []
    for depth in spec.space.depths:
        for budget in budgets:
            cell = spec.cell(depth, float(budget))
            for seed in DENSE_SEEDS:
                records.append(
                    TrialRecord(
                        trial_id="",
                        stage="grid",
                        depth=depth,
                        width=cell.shape.width,
                        heads=cell.shape.heads,
                        budget=float(budget),
                        params_non_embedding=cell.params_non_embedding,
                        params_total=cell.params_total,
                        seed=seed,
                        status="finished",
                        best_val_loss=final_loss(spec, cell.shape, seed),
                        simulated=True,
                    )
                )
    return records


def crossing(points: list, interpolate: bool) -> float:
    """N* between the last positive and first negative mean Δ (NaN if no sign change)."""
    means = [p.decision.mean for p in points]
    first = next((i for i, m in enumerate(means) if m < 0), None)
    if not first:
        return math.nan
    low, high = points[first - 1], points[first]
    if not interpolate:
        return math.exp(0.5 * (low.log_n + high.log_n))
    share = low.decision.mean / (low.decision.mean - high.decision.mean)
    return math.exp(low.log_n + share * (high.log_n - low.log_n))


def dense_error(spec: ExperimentSpec, size: int, interpolate: bool) -> float:
    budgets = np.geomspace(min(spec.space.budgets), max(spec.space.budgets), size)
    records = dense_records(spec, budgets)
    errors = []
    for pair in spec.refine.pairs:
        grid = pair_start(records, tuple(pair), tuple(budgets), DENSE_SEEDS, 2.0, 0.0)
        n_star = crossing(list(grid.points), interpolate)
        errors.append(log_error(spec, pair[1], n_star) if math.isfinite(n_star) else math.inf)
    return max(errors)


def dense_size_for(specs: list, target: float, interpolate: bool, largest: int) -> int:
    """Smallest sizes-per-depth K whose largest error over every law is within ``target``."""
    size = len(specs[0].space.budgets)
    while size <= largest:
        if all(dense_error(spec, size, interpolate) <= target for spec in specs):
            return size
        size = max(size + 1, int(size * 1.05))
    raise SystemExit(f"no dense grid up to {largest} sizes per depth reaches {target}")


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--laws", type=int, default=10, help="planted laws to average over")
    parser.add_argument("--noise", type=float, default=0.002, help="seed sd of a loss (nats)")
    parser.add_argument(
        "--target", type=float, default=0.05, help="relative error in N* both methods must reach"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the law perturbations")
    args = parser.parse_args(argv)
    base = load_spec(SPEC)
    specs = planted_specs(base, args.laws, args.noise, args.seed)
    target = math.log1p(args.target)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dwtune-bench-") as tmp:
        results = [run_dwtune(spec, Path(tmp) / str(i)) for i, spec in enumerate(specs)]
    ours = sum(r[0] for r in results) / len(results)
    our_error = max(r[1] for r in results)
    print(
        f"setting: {args.laws} planted laws (a = {base.simulated.a} ± 0.3, b = "
        f"{base.simulated.b} ± 0.005), noise sd {args.noise} nats, depths "
        f"{list(base.space.depths)}, pairs {[list(p) for p in base.refine.pairs]}, sizes "
        f"{min(base.space.budgets):.0e}..{max(base.space.budgets):.0e}; target: N* within "
        f"{args.target:.0%}"
    )
    print(
        f"dwtune (grid {len(base.space.budgets)} sizes x {len(base.space.seeds)} seed + refine,"
        f" tolerance {base.refine.tolerance}, seeds {base.refine.seeds}..."
        f"{base.refine.max_seeds}): {ours:.0f} trainings per study, largest N* error "
        f"{math.expm1(our_error):.1%}"
    )
    if our_error > target:
        print("dwtune missed the target: loosen --target or tighten refine.tolerance")
        return 1
    for interpolate in (False, True):
        size = dense_size_for(specs, target, interpolate, largest=2000)
        dense = size * len(base.space.depths) * len(DENSE_SEEDS)
        label = "interpolated crossing" if interpolate else "paper style, bracket midpoint"
        print(
            f"dense grid ({label}): {size} sizes per depth x {len(DENSE_SEEDS)} reruns = "
            f"{dense} trainings per study; ratio dwtune / dense = {ours / dense:.1%}"
        )
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
