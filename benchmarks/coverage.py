"""Coverage of the refine decision and the N* intervals on every simulated surface, with the
spec's noise guess right and wrong.

SIMULATED DATA (dwtune.backends.simulated_surface). For each surface and each noise/prior
ratio, ``--pairs`` depth pairs (Ls, Ld) = (12, 18), each with its own planted N*
(``simulated.a`` drawn so that ln N*(Ld) is uniform over the grid's interior) and its own
seeds, are refined end to end through the decision code the refine stage runs
(:mod:`dwtune.core.refine.points`, :mod:`dwtune.core.refine.steps`,
:mod:`dwtune.core.refine.estimate`:
the functions :class:`dwtune.study.refine.PairRefiner` calls, in the same order), in process:
no Ray, no Optuna (its journal only records the points; it decides nothing). Trainings are the
surface's own per-seed outcomes (:func:`seed_outcome`: noise, outliers, divergences), both nets
of a point at exactly the budget's size (real-valued widths, so no size correction enters).
The grid and the refine settings are those of ``search_spaces/simulated.yaml``: 9 budgets
1e6..1e10, 1 grid seed, refine seeds 1, max_seeds 4, tolerance 5%, 8 rounds, alpha 0.05.

The estimator is never handed the true noise: ``refine.noise_prior`` is the surface's true
paired sd (at the planted N*) divided by the ratio (``--ratios``, default 0.5 1 2 5: a guess
twice too large, right, twice and five times too small), worth ``refine.noise_prior_dof``
pseudo-observations as in every spec.

Surfaces: the seven of :mod:`dwtune.backends.simulated` (default, depth_noise, non_monotone,
outliers, divergences, lr_mistuned, asymmetric), ``flat`` (Δ ∝ tanh³: flat at N*),
``size_noise`` (the seed noise grows 0.15 per e-fold of N), and ``independent`` (the default
surface with the two depths' seed noise independent: seed_correlation 0), ``seed_sizes_05`` and
``seed_sizes_08`` (a seed's luck at a depth persists across sizes: its paired Δ deviation is
correlated 0.5 / 0.8 between sizes, ``simulated.seed_size_correlation``).

Printed per surface and ratio:

- the share of pairs bracketed (non_monotone on the non_monotone surface);
- where a transition is reported (bracketed), coverage of its 68% and 95% intervals of the
  true crossing (the zero of the surface's mean Δ, :func:`mean_sign_changes`; the one nearest
  the estimate where there are several) and the median |ln N*/N*_true|;
- false-sign rate at a true Δ of 0: a point trained at the true crossing (Δ = 0 there exactly)
  is tested by the sequential rule with the pair's grid points beside it, seeds added as the
  refine stage adds them; the share given a sign, marked ``!`` where it exceeds α + 2 binomial
  se; the same for a point at the true crossing inside the refined pair (beside its final
  points, the same seeds: where a seed's luck persists across sizes, the pair's pooled noise and
  the point share it); and the wrong-sign rate at |Δ| = 0.25 sd (the sizes where the mean Δ
  is ±0.25 of the paired noise sd near the crossing);
- of the bracketed pairs, the share flagged kinked (Δ beside the bracket rises against ln N,
  transitions.kinked) and the share stopped on the round cap with a wide bracket
  (transitions.capped_wide, its 95% interval spanning the bracket);
- trainings per pair: grid (18) + refine.

Run: ``python benchmarks/coverage.py --jobs 2`` (defaults: 200 pairs, every surface, ratios
0.5 1 2 5; about 40 minutes on 2 cores); ``--surfaces flat --ratios 1 --pairs 50`` for a look.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from types import SimpleNamespace

import numpy as np
from scipy import optimize

from dwtune.backends.simulated_surface import (
    mean_sign_changes,
    pair_delta_mean,
    paired_noise_sd,
    seed_outcome,
)
from dwtune.core import vocabulary
from dwtune.core.records import TrialRecord
from dwtune.core.refine.design import design_for
from dwtune.core.refine.outcome import decide_points
from dwtune.core.refine.points import PairPoint, make_point, merge_points
from dwtune.core.refine.steps import (
    decide_seeds,
    next_step,
    point_done,
    seed_sequence,
    seeds_wanted,
)
from dwtune.core.refine.transition import make_transition
from dwtune.core.refine.trend import SizeTrend
from dwtune.core.spec import RefineConfig, SimulatedConfig

PAIR = (12, 18)
BUDGETS = tuple(float(b) for b in np.geomspace(1e6, 1e10, 9))
GRID_SEEDS = (0,)
REFINE = RefineConfig(pairs=(PAIR,), tolerance=0.05, seeds=1, max_seeds=4, max_rounds=8, alpha=0.05)
# refine.design: law (--design law): each pair's first points at its law guess e^(±reach), the
# guess off the planted N* by --guess-offset e-folds plus a normal error of --guess-sd e-folds
# (drawn from its own stream, so the planted N* and the seeds are those of the grid design);
# cuts placed by information;
# its own stops, the spec's defaults (reach 0.35, a bracket within 10%, 3 seeds a size) but 5
# rounds: docs/method.md, "The law design's stops"
LAW_REFINE = RefineConfig(pairs=(PAIR,), design="law", seeds=1, max_rounds=5, alpha=0.05)
SPAN = (math.log(BUDGETS[0]), math.log(BUDGETS[-1]))  # where extensions stop
LR = 1e-3  # the shared learning rate of the lr_mistuned surface
SURFACES = {
    "default": {},
    "depth_noise": {"surface": "depth_noise"},
    "non_monotone": {"surface": "non_monotone"},
    "outliers": {"surface": "outliers"},
    "divergences": {"surface": "divergences"},
    "lr_mistuned": {"surface": "lr_mistuned", "lr_penalty": 0.005},
    "asymmetric": {"surface": "asymmetric"},
    "flat": {"surface": "flat"},
    "size_noise": {"surface": "size_noise"},
    "independent": {"seed_correlation": 0.0},
    # a seed's luck at a depth persists across sizes: its paired Δ deviation is correlated
    # 0.5 / 0.8 between sizes (simulated.seed_size_correlation)
    "seed_sizes_05": {"seed_size_correlation": 0.5},
    "seed_sizes_08": {"seed_size_correlation": 0.8},
}
RATIOS = (0.5, 1.0, 2.0, 5.0)  # true paired sd ÷ the spec's guess
MARGIN = 3.0  # e-folds between the grid's ends and the planted N* (room for the dip)


# --------------------------------------------------------------------------- one simulated pair


class SimulatedPair:
    """One planted pair: trainings on demand, cached like the experiment store."""

    def __init__(
        self,
        base: SimulatedConfig,
        replicate: int,
        rng: np.random.Generator,
        ratio: float,
        law: tuple[float, int, float] | None = None,
    ):
        low, high = math.log(BUDGETS[0]) + MARGIN, math.log(BUDGETS[-1]) - MARGIN / 2
        x_star = rng.uniform(low, high)
        depth = PAIR[1]
        a = (x_star - math.log(12.0 * depth)) / 2.0 - base.b * depth
        self.config = dataclasses.replace(base, a=a)
        self.lr = LR if self.config.lr_penalty > 0 else None
        self.truth = mean_sign_changes(self.config, *PAIR, lr=self.lr)
        true_sd = paired_noise_sd(self.config, *PAIR, n_params=self.truth[-1])
        template = REFINE if law is None else LAW_REFINE
        self.refine = dataclasses.replace(template, noise_prior=true_sd / ratio)
        # the design refine.design names (its steps: the first sizes are placed here)
        self.design = design_for(SimpleNamespace(refine=self.refine))  # type: ignore[arg-type]
        self.seed_base = 1000 * replicate
        self.budgets = BUDGETS
        if law is not None:  # law design: the guess's error from its own stream (module doc)
            guess_sd, seed, offset = law
            error = offset + np.random.default_rng([seed, 7, replicate]).normal(0.0, guess_sd)
            centre = math.log(self.truth[-1]) + error
            sizes = (math.exp(centre - LAW_REFINE.reach), math.exp(centre + LAW_REFINE.reach))
            self.budgets = tuple(min(max(b, BUDGETS[0]), BUDGETS[-1]) for b in sizes)
        self.cache: dict[tuple[int, float, int], TrialRecord] = {}
        self.trainings = 0
        self.refined: list[PairPoint] = []  # the refined pair's points (refine_pair)

    def record(self, depth: int, budget: float, seed: int) -> TrialRecord:
        key = (depth, budget, seed)
        if key not in self.cache:
            self.trainings += 1
            width = math.sqrt(budget / (12.0 * depth))
            linked = (depth,) if depth == PAIR[1] else ()
            out = seed_outcome(self.config, linked, depth, width, self.seed_base + seed, lr=self.lr)
            status = vocabulary.STATUS_DIVERGED if out.diverged else vocabulary.STATUS_FINISHED
            self.cache[key] = TrialRecord(
                trial_id=str(key), stage="refine", depth=depth, width=int(width), heads=2,
                budget=budget, params_non_embedding=int(budget), params_total=int(budget),
                seed=seed, status=status, best_val_loss=out.loss, simulated=True,
            )  # fmt: skip
        return self.cache[key]

    def point(self, budget: float, seeds: int, kind: str, verified: bool = False) -> PairPoint:
        """Both depths at ``budget`` for the first ``seeds`` seeds (same seeds order as refine)."""
        order = seed_sequence(GRID_SEEDS, seeds)[:seeds]
        deep = {s: self.record(PAIR[1], budget, s) for s in order}
        shallow = {s: self.record(PAIR[0], budget, s) for s in order}
        sizes = (math.log(budget), int(math.sqrt(budget / 216)), int(math.sqrt(budget / 144)))
        trend = SizeTrend([], [])  # both nets at exactly the budget's size
        point = make_point(budget, sizes, deep, shallow, trend, kind, seeds)
        return dataclasses.replace(point, verified=verified)

    def grid(self) -> list[PairPoint]:
        return [self.point(b, len(GRID_SEEDS), "grid") for b in self.budgets]


# --------------------------------------------------------------------------- the refine loop


def evaluate(sim: SimulatedPair, context, budget, kind, start, verified) -> PairPoint:
    """PairRefiner._evaluate: seeds until the sign is decided or max_seeds."""
    wanted = start
    while True:
        point = sim.point(budget, wanted, kind, verified)
        merged = merge_points(context, [point])
        decided = decide_points(merged, sim.refine)
        point = next(p for p in decided if p.budget == budget)
        if point_done(point, kind, wanted, sim.refine):
            return point
        wanted = seeds_wanted(point.decision, wanted, sim.refine)


def refine_pair(sim: SimulatedPair):
    """PairRefiner.rounds: verify, scan, bisect, re-verify, then the transition."""
    refine = sim.refine
    grid, later, rounds = sim.grid(), [], 0
    while True:
        points = decide_points(merge_points(grid, later), refine)
        step = next_step(points, refine, rounds, span=SPAN, design=sim.design)
        if step.kind == "done":
            break
        if step.kind in ("bisect", "scan", "extend"):
            rounds += step.kind == "bisect"
            budget, start, verified = math.exp(step.log_n), max(refine.seeds, step.seeds), False
        else:
            budget = step.point.budget
            start = max(refine.seeds, step.seeds, step.point.requested)
            verified = step.reverifies
        later.append(evaluate(sim, points, budget, step.kind, start, verified))
    merged = merge_points(grid, later)
    sim.refined = merged
    return make_transition(
        PAIR,
        merged,
        refine,
        trials=0,
        rounds=rounds,
        simulated=True,
        reason=step.reason,
        round_capped=step.round_capped,
    )


# --------------------------------------------------------------------------- point tests


def size_where(sim: SimulatedPair, target: float) -> float | None:
    """ln N nearest the first true crossing where the mean Δ equals ``target`` nats."""
    x0 = math.log(sim.truth[-1])

    def gap(x: float) -> float:
        return pair_delta_mean(sim.config, *PAIR, math.exp(x), lr=sim.lr) - target

    side = -1.0 if target > 0 else 1.0  # Δ > 0 below the crossing
    far = x0 + side * 1.5
    if np.sign(gap(x0)) == np.sign(gap(far)):
        return None
    return optimize.brentq(gap, *sorted((x0, far)), xtol=1e-10)


def point_sign(sim: SimulatedPair, log_n: float, beside: list[PairPoint] | None = None) -> int:
    """Sign the sequential rule gives a fresh point at ``log_n`` beside the pair's grid, or
    beside ``beside`` (a refined pair's points: its noise pooled from them, the same seeds)."""
    context = decide_points(sim.grid() if beside is None else beside, sim.refine)
    start = decide_seeds(sim.refine)  # a bisect step starts with two seeds
    point = evaluate(sim, context, math.exp(log_n), "bisect", start, False)
    return point.decision.sign


# --------------------------------------------------------------------------- one surface


def nearest_truth(sim: SimulatedPair, n_star: float) -> float:
    return min(sim.truth, key=lambda t: abs(math.log(t / n_star)))


def run_surface(
    name: str,
    ratio: float,
    pairs: int,
    seed: int,
    guess_sd: float | None = None,
    offset: float = 0.0,
) -> dict:
    """One surface and ratio; ``guess_sd``: the law design with a guess off by ``offset``
    e-folds plus a normal error of that sd, else the grid design."""
    base = SimulatedConfig(**SURFACES[name])
    law = None if guess_sd is None else (guess_sd, seed, offset)
    rng = np.random.default_rng([seed, list(SURFACES).index(name)])
    stats = {"name": name, "ratio": ratio, "status": {}, "in68": 0, "in95": 0, "errors": []}
    stats |= {"kinked": 0, "capped": 0}
    stats |= {"trainings": [], "zero": [0, 0], "quarter": [0, 0], "inside": [0, 0]}
    for replicate in range(pairs):
        sim = SimulatedPair(base, replicate, rng, ratio, law)
        t = refine_pair(sim)
        stats["status"][t.status] = stats["status"].get(t.status, 0) + 1
        stats["trainings"].append(sim.trainings)
        # a point at the true crossing inside the refined pair (its seeds' luck shared with the
        # pair's points where the surface persists it across sizes)
        stats["inside"][0] += point_sign(sim, math.log(sim.truth[-1]), sim.refined) != 0
        stats["inside"][1] += 1
        if t.status == vocabulary.TransitionStatus.BRACKETED:
            truth = nearest_truth(sim, t.n_star)
            stats["in68"] += t.n_star_low_68 <= truth <= t.n_star_high_68
            stats["in95"] += t.n_star_low <= truth <= t.n_star_high
            stats["errors"].append(abs(math.log(t.n_star / truth)))
            stats["kinked"] += t.kinked
            stats["capped"] += t.capped_wide
        tested = SimulatedPair(base, replicate + pairs, rng, ratio, law)  # fresh seeds: tests
        stats["zero"][0] += point_sign(tested, math.log(tested.truth[-1])) != 0
        stats["zero"][1] += 1
        sd = paired_noise_sd(tested.config, *PAIR, n_params=tested.truth[-1])
        for target in (0.25 * sd, -0.25 * sd):
            x = size_where(tested, target)
            if x is not None:
                stats["quarter"][0] += point_sign(tested, x) == -np.sign(target)
                stats["quarter"][1] += 1
    return stats


# --------------------------------------------------------------------------- report


def percent(hits: int, total: int) -> str:
    return (
        f"{100 * hits / total:.1f} ± {100 * math.sqrt(hits * (total - hits) / total) / total:.1f}"
    )


HEADER = (
    "| surface | noise/prior | status | 68% | 95% | median abs ln(N*/N*_true) "
    "| false sign at Δ=0 | at Δ=0 inside the refined pair | wrong sign at 0.25 sd "
    "| kinked | capped wide | trainings/pair |"
)


def row(stats: dict, pairs: int, alpha: float) -> str:
    """One Markdown row: the surface, the ratio and what was measured (module doc)."""
    status = stats["status"]
    main = "non_monotone" if stats["name"] == "non_monotone" else "bracketed"
    bracketed = status.get(vocabulary.TransitionStatus.BRACKETED, 0)
    shares = f"{main} {100 * status.get(main, 0) / pairs:.0f}%"
    cover = [percent(stats[k], bracketed) if bracketed else "n/a" for k in ("in68", "in95")]
    flags = [percent(stats[k], bracketed) if bracketed else "n/a" for k in ("kinked", "capped")]
    error = f"{np.median(stats['errors']):.4f}" if stats["errors"] else "n/a"
    hits, total = stats["zero"]
    limit = alpha + 2 * math.sqrt(alpha * (1 - alpha) / total)
    zero = percent(hits, total) + (" !" if hits / total > limit else "")
    hits, total = stats["inside"]
    limit = alpha + 2 * math.sqrt(alpha * (1 - alpha) / total)
    inside = percent(hits, total) + (" !" if hits / total > limit else "")
    quarter = percent(*stats["quarter"]) if stats["quarter"][1] else "n/a"
    trainings = f"{np.mean(stats['trainings']):.1f}"
    cells = [stats["name"], f"{stats['ratio']:g}", shares, *cover, error, zero, inside]
    cells += [quarter, *flags, trainings]
    return "| " + " | ".join(cells) + " |"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200, help="simulated pairs per surface")
    parser.add_argument("--seed", type=int, default=0, help="seed of the planted N* draws")
    parser.add_argument("--surfaces", nargs="*", default=list(SURFACES), choices=list(SURFACES))
    parser.add_argument(
        "--ratios", nargs="*", type=float, default=list(RATIOS),
        help="true paired noise sd ÷ the spec's guess (refine.noise_prior)",
    )  # fmt: skip
    parser.add_argument("--jobs", type=int, default=1, help="processes (tasks in parallel)")
    parser.add_argument("--design", choices=("grid", "law"), default="grid", help="refine.design")
    parser.add_argument(
        "--guess-sd", type=float, default=0.5,
        help="law design: sd (e-folds) of the law guess's error about the planted N*",
    )  # fmt: skip
    parser.add_argument(
        "--guess-offset", type=float, default=0.0,
        help="law design: fixed offset (e-folds) of the law guess from the planted N*",
    )  # fmt: skip
    args = parser.parse_args(argv)
    started = time.perf_counter()
    print(
        f"SIMULATED: {args.pairs} pairs per surface and ratio, pair {PAIR}, seed {args.seed}; "
        f"refine alpha {REFINE.alpha} (α-spending over {REFINE.max_seeds} looks), noise prior "
        f"worth {REFINE.noise_prior_dof:g} pseudo-observations; '!' marks a false-sign rate "
        f"above α + 2 binomial se"
    )
    guess = args.guess_sd if args.design == "law" else None
    if guess is not None:
        print(
            f"law design: first points at the guess e^(±{LAW_REFINE.reach}), guess off by "
            f"{args.guess_offset:+g} + N(0, {guess}²) e-folds; its stops: tolerance "
            f"{LAW_REFINE.tolerance}, "
            f"{LAW_REFINE.max_seeds} seeds a size (α-spending over as many looks), "
            f"{LAW_REFINE.max_rounds} rounds"
        )
    tasks = [
        (name, r, args.pairs, args.seed, guess, args.guess_offset)
        for name in args.surfaces
        for r in args.ratios
    ]
    print(HEADER)
    print("|" + "---|" * HEADER.count("|", 1), flush=True)
    with ProcessPoolExecutor(args.jobs) as pool:  # rows print as their tasks finish, in order
        for stats in pool.map(run_surface, *zip(*tasks, strict=True)):
            print(row(stats, args.pairs, REFINE.alpha), flush=True)
    print(f"wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
