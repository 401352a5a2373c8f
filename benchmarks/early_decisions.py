"""Early sign decisions on simulated partial curves: false decisions and training saved.

SIMULATED DATA: the curves are the simulated backend's ``late_descent`` model
(:func:`dwtune.backends.simulated_surface.curve_excess`, a deeper net descends later, plus
independent eval noise), never a measurement of a model.

One pair point: a shallower and a deeper net (depths ``--depths``) at one size, ``k`` paired
seeds, both trained ``--steps`` steps with an eval every ``--eval-every``. Each realisation draws
the seeds' end losses (paired sd ``--noise``), the curves, and the pair's learned noise estimate
(sd ``--noise`` · sqrt(χ²_ν / ν) on ``ν = --noise-dof`` degrees of freedom, as the refine stage
learns it from the pair's other seeds), then walks the looks of
:func:`dwtune.core.refine.early.first_settled`. Per true end Δ (in units of the paired sd):

- settled: share of points the rule stopped before the end;
- false: share of points whose settled sign differs from the true sign (at Δ = 0 every
  settled sign is false); the rule's bound is ``--alpha``;
- vs end: share of points whose settled sign differs from the sign of the seeds' own mean end
  Δ (what the full trainings would have shown; at Δ = 0 about half of the settled points);
- saved: the share of the point's training FLOPs not spent (both nets have the same size, so
  FLOPs are proportional to the steps trained).

With ``--study``: a small simulated study (depths 6 and 12, the ``late_descent`` curves, evals
every 25 of 1,000 steps) refined through Ray Tune twice, with ``refine.early_stop`` off and on:
the refine stage's trainings, how many stopped early, its training FLOPs (the trained tokens
priced by ``dwtune.core.oracle_floor.spent_flops``), the share of the stopped trainings'
FLOPs saved, and N* with its 95% interval against the planted one.

With ``--torch``: real curves, not simulated. The quickstart spec's char-level Shakespeare
nets, depths 1 and 2 at sizes 1e5 and 1e6, three paired seeds each, trained in this process on
the CPU with an eval every 25 of 800 steps; the pair's noise is the seeds' own end-Δ spread
(pooled over both sizes). Per size: where the rule settles, its sign, and the end Δ.

    python benchmarks/early_decisions.py [--points 4000] [--seeds 2 3] [--min-fraction 0.3]
    python benchmarks/early_decisions.py --study
    python benchmarks/early_decisions.py --torch
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dwtune.backends.simulated_surface import curve_excess
from dwtune.core.refine.early import EarlyRule, first_settled, planned_evals
from dwtune.core.spec import SimulatedConfig

# true end Δ in paired sd (deeper loses: +); 25 sd is the simulated gap (0.05 nats) far from N*
DELTAS_SD = (0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 5.0, -5.0, 10.0, -10.0, 25.0, -25.0)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=4000, help="realisations per row")
    parser.add_argument("--seeds", type=int, nargs="+", default=[2, 3])
    parser.add_argument(
        "--deltas", type=float, nargs="+", default=list(DELTAS_SD), help="true end Δ / sd"
    )
    parser.add_argument("--depths", type=int, nargs=2, default=[6, 12])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--noise", type=float, default=0.002, help="paired end-Δ sd (nats)")
    parser.add_argument("--noise-dof", type=float, default=8.0)
    parser.add_argument("--eval-noise", type=float, default=0.001, help="per-eval sd (nats)")
    parser.add_argument("--lag", type=float, default=0.1, help="simulated.curve_lag")
    parser.add_argument("--excess", type=float, default=4.0, help="start − final loss (nats)")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--min-fraction", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--study", action="store_true", help="a Tune study, early_stop off/on")
    parser.add_argument("--torch", action="store_true", help="real curves of tiny torch nets")
    return parser.parse_args(argv)


def point_deltas(args, rng, config, progress, delta, seeds) -> tuple[np.ndarray, np.ndarray]:
    """(seeds × evals partial Δ, each seed's end Δ) of one simulated pair point."""
    shallow, deep = args.depths
    end = delta + args.noise * rng.standard_normal(seeds)
    shape = args.excess * (
        curve_excess(progress, deep, config) - curve_excess(progress, shallow, config)
    )
    evals = args.eval_noise * rng.standard_normal((2, seeds, progress.size))
    evals[:, :, -1] = 0.0  # the last eval is the final loss itself
    partial = end[:, None] + shape[None, :] + evals[1] - evals[0]
    return partial, end


def row(args, rng, rule, delta_sd: float, seeds: int) -> dict:
    config = SimulatedConfig(curve="late_descent", curve_lag=args.lag)
    steps = planned_evals(args.steps, args.eval_every)
    progress = np.asarray(steps, float) / args.steps
    delta = delta_sd * args.noise
    settled = false = vs_end = 0
    saved = 0.0
    for _ in range(args.points):
        partial, end = point_deltas(args, rng, config, progress, delta, seeds)
        sd = args.noise * math.sqrt(rng.chisquare(args.noise_dof) / args.noise_dof)
        step, call = first_settled(rule, steps, partial, args.steps, sd, args.noise_dof)
        if not call.settled:
            continue
        settled += 1
        saved += 1.0 - step / args.steps
        false += call.sign != np.sign(delta)
        vs_end += call.sign != np.sign(end.mean())
    n = args.points
    return {
        "delta_sd": delta_sd,
        "seeds": seeds,
        "settled": settled / n,
        "false": false / n,
        "vs_end": vs_end / n,
        "saved": saved / n,
    }


STUDY_OVERRIDES = [
    "space.depths=[6, 12]",
    "space.budgets={min: 1e6, max: 1e10, num: 5}",
    "space.seeds=2",
    "refine.pairs=[[6, 12]]",
    "refine.seeds=2",
    "refine.max_seeds=3",
    "refine.max_rounds=6",
    "refine.scan_spacing=0",
    "train.steps=1000",
    "train.eval_every=25",
    "simulated.curve=late_descent",
    "resources.cpu=0.5",
]


def study(early: bool) -> dict:
    """One simulated study refined through Tune (module doc); its refine stage's numbers."""
    import tempfile

    from dwtune.backends.simulated import planted_transition
    from dwtune.core.oracle_floor import spent_flops
    from dwtune.core.records import grid_requests
    from dwtune.core.spec import load_spec
    from dwtune.storage.store import ExperimentStore
    from dwtune.study.refine import RefineStage
    from dwtune.study.runners.ray_tune import TuneRunner

    spec_path = Path(__file__).resolve().parents[1] / "search_spaces" / "simulated.yaml"
    spec = load_spec(spec_path, [*STUDY_OVERRIDES, f"refine.early_stop={str(early).lower()}"])
    with tempfile.TemporaryDirectory() as root:
        store = ExperimentStore.for_spec(Path(root), spec)
        store.initialise(spec)
        with TuneRunner(spec, store) as runner:
            runner.run(grid_requests(spec))
            (transition,) = RefineStage(spec, store).run_on(runner)
        refine = [r for r in store.records() if r.stage == "refine"]
    template = spec.cell(6, spec.space.budgets[0]).shape
    per_step = spec.train.batch_size * spec.data.seq_len
    trained = [(r.depth, r.width, r.heads, float(r.tokens)) for r in refine]
    planned = [(r.depth, r.width, r.heads, float(1000 * per_step)) for r in refine]
    stopped = [r for r in refine if r.stopped_step]
    stopped_flops = spent_flops(template, [(r.depth, r.width, r.heads, r.tokens) for r in stopped])
    stopped_planned = spent_flops(
        template, [(r.depth, r.width, r.heads, 1000.0 * per_step) for r in stopped]
    )
    return {
        "early_stop": early,
        "trainings": len(refine),
        "stopped": len(stopped),
        "flops": spent_flops(template, trained),
        "planned": spent_flops(template, planned),
        "stopped_saved": 1 - stopped_flops / stopped_planned if stopped else 0.0,
        "n_star": transition.n_star,
        "low": transition.n_star_low,
        "high": transition.n_star_high,
        "planted": planted_transition(spec.simulated, 12),
        "status": str(transition.status),
    }


def print_studies() -> None:
    print("SIMULATED study (late_descent curves), refine stage through Ray Tune")
    print(
        f"{'early_stop':>10} {'trainings':>9} {'stopped':>7} {'FLOPs':>9} {'saved':>6} "
        f"{'stopped saved':>13} {'N*':>9} {'95% interval':>21} {'planted':>9} status"
    )
    for early in (False, True):
        r = study(early)
        saved = 1 - r["flops"] / r["planned"]
        print(
            f"{r['early_stop']!s:>10} {r['trainings']:>9d} {r['stopped']:>7d} "
            f"{r['flops']:>9.3g} {saved:>6.1%} {r['stopped_saved']:>13.1%} {r['n_star']:>9.4g} "
            f"[{r['low']:.4g}, {r['high']:.4g}] {r['planted']:>9.4g} {r['status']}"
        )


TORCH_OVERRIDES = ["train.steps=800", "train.eval_every=25", "train.eval_batches=8"]
TORCH_SIZES = (1e5, 1e6)
TORCH_SEEDS = (0, 1, 2)


def torch_points() -> dict[float, tuple[list[int], np.ndarray, int]]:
    """Per size: (eval steps, seeds × steps of the paired Δ, total steps) of real trainings."""
    from dwtune.backends.trial import run_trial_inprocess
    from dwtune.core.records import make_request
    from dwtune.core.refine.early import paired_curves
    from dwtune.core.spec import load_spec

    spec_path = Path(__file__).resolve().parents[1] / "search_spaces" / "quickstart.yaml"
    spec = load_spec(spec_path, TORCH_OVERRIDES)
    total = spec.train.total_steps(spec.data.seq_len)
    points = {}
    for size in TORCH_SIZES:
        curves: dict[int, list] = {1: [], 2: []}
        for seed in TORCH_SEEDS:
            for depth in (1, 2):
                request = make_request(spec, spec.cell(depth, size), seed, "grid")
                curves[depth].append(run_trial_inprocess(spec, request).curve)
        steps, deltas = paired_curves(curves[2], curves[1], total)
        points[size] = (steps, deltas, total)
    return points


def print_torch(args) -> None:
    points = torch_points()
    ends = [deltas[:, -1] for _, deltas, _ in points.values()]
    ss = sum(float(np.sum((e - e.mean()) ** 2)) for e in ends)
    dof = float(sum(e.size - 1 for e in ends))
    sd = math.sqrt(ss / dof)
    rule = EarlyRule(alpha=args.alpha, min_fraction=args.min_fraction)
    print(
        "REAL curves (torch, CPU): quickstart spec, depths 1/2, 800 steps, eval every 25, "
        f"{len(TORCH_SEEDS)} seeds; paired end-Δ sd {sd:.4f} on {dof:g} dof"
    )
    print(f"{'size':>6} {'end Δ':>8} {'se':>7} {'settled at':>10} {'sign':>4} {'saved':>6}")
    for size, (steps, deltas, total) in points.items():
        step, call = first_settled(rule, steps, deltas, total, sd, dof)
        end = deltas[:, -1]
        se = float(end.std(ddof=1) / math.sqrt(end.size))
        print(
            f"{size:>6.0e} {end.mean():>+8.4f} {se:>7.4f} {step:>10d} {call.sign:>+4d} "
            f"{1 - step / total:>6.1%}"
        )


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.study:
        print_studies()
        return
    if args.torch:
        print_torch(args)
        return
    rng = np.random.default_rng(args.seed)
    rule = EarlyRule(alpha=args.alpha, min_fraction=args.min_fraction)
    print(
        f"SIMULATED late_descent curves: depths {args.depths[0]}/{args.depths[1]}, "
        f"{args.steps} steps, eval every {args.eval_every}, paired sd {args.noise} "
        f"(learned on {args.noise_dof:g} dof), eval sd {args.eval_noise}, curve_lag {args.lag}, "
        f"alpha {args.alpha}, min_fraction {args.min_fraction}, {args.points} points per row"
    )
    print(f"{'Δ/sd':>6} {'seeds':>5} {'settled':>8} {'false':>7} {'vs end':>7} {'saved':>7}")
    for seeds in args.seeds:
        for delta_sd in args.deltas:
            r = row(args, rng, rule, delta_sd, seeds)
            print(
                f"{r['delta_sd']:>6g} {r['seeds']:>5d} {r['settled']:>8.3f} {r['false']:>7.4f} "
                f"{r['vs_end']:>7.4f} {r['saved']:>7.3f}"
            )


if __name__ == "__main__":
    main()
