"""Coverage of the refine decision and the N* intervals on every simulated surface.

SIMULATED DATA (dwtune.backends.simulated_surface). For each surface, ``--pairs`` depth pairs
(Ls, Ld) = (12, 18), each with its own planted N* (``simulated.a`` drawn so that ln N*(Ld) is
uniform over the grid's interior) and its own seeds, are refined end to end through the decision
code the refine stage runs (:mod:`dwtune.core.pair_points`, :mod:`dwtune.core.transitions`,
:mod:`dwtune.core.crossing`: the functions :class:`dwtune.study.refine.PairRefiner` calls, in
the same order), in process: no Ray, no Optuna (its journal only records the points; it decides
nothing). Trainings are the surface's own per-seed outcomes (:func:`seed_outcome`: noise,
outliers, divergences), both nets of a point at exactly the budget's size (real-valued widths,
so no size correction enters). The grid and the refine settings are those of
``search_spaces/simulated.yaml``: 9 budgets 1e6..1e10, 1 grid seed, refine seeds 1, max_seeds
4, tolerance 5%, 8 rounds, noise_z 2, alpha 0.05.

Printed per surface:

- status shares (bracketed, censored, non_monotone, undecided);
- where a transition is reported (bracketed), coverage of its 68% and 95% intervals of the
  true crossing (the zero of the surface's mean Δ, :func:`mean_sign_changes`; the one nearest
  the estimate where there are several) and the median |ln N*/N*_true|;
- false-sign rate at a true Δ of 0: a point trained at the true crossing (Δ = 0 there exactly)
  is tested by the sequential rule with the pair's grid points beside it, seeds added as the
  refine stage adds them; the share given a sign; and the wrong-sign rate at |Δ| = 0.25 sd (the
  sizes where the mean Δ is ±0.25 of the paired noise sd near the crossing);
- trainings per pair: grid (18) + refine.

On the default surface the same pairs are also refined by the decision rule the refine stage
used before (a z-test with noise_z at every look, pooled sd with a prior, the first negative
point closing the bracket, the bracket's midpoint as N* with σ = sqrt(h² + (se/slope)²)): a copy
kept here for this comparison only (``OldRule``).

Run: ``python benchmarks/coverage.py`` (defaults: 200 pairs per surface, every surface, about
6 minutes on 2 shared cores; ``--jobs 2`` splits surfaces over processes).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from scipy import optimize

from dwtune.backends.simulated_surface import (
    mean_sign_changes,
    pair_delta_mean,
    paired_noise_sd,
    seed_outcome,
)
from dwtune.core import pair_points, transitions, vocabulary
from dwtune.core.pair_points import PairPoint, SizeTrend
from dwtune.core.records import TrialRecord
from dwtune.core.spec import RefineConfig, SimulatedConfig

PAIR = (12, 18)
BUDGETS = tuple(float(b) for b in np.geomspace(1e6, 1e10, 9))
GRID_SEEDS = (0,)
REFINE = RefineConfig(
    pairs=(PAIR,), tolerance=0.05, seeds=1, max_seeds=4, max_rounds=8, alpha=0.05
)
LR = 1e-3  # the shared learning rate of the lr_mistuned surface
SURFACES = {
    "default": {},
    "depth_noise": {"surface": "depth_noise"},
    "non_monotone": {"surface": "non_monotone"},
    "outliers": {"surface": "outliers"},
    "divergences": {"surface": "divergences"},
    "lr_mistuned": {"surface": "lr_mistuned", "lr_penalty": 0.005},
    "asymmetric": {"surface": "asymmetric"},
}
MARGIN = 3.0  # e-folds between the grid's ends and the planted N* (room for the dip)


# --------------------------------------------------------------------------- one simulated pair


class SimulatedPair:
    """One planted pair: trainings on demand, cached like the experiment store."""

    def __init__(self, base: SimulatedConfig, replicate: int, rng: np.random.Generator):
        low, high = math.log(BUDGETS[0]) + MARGIN, math.log(BUDGETS[-1]) - MARGIN / 2
        x_star = rng.uniform(low, high)
        depth = PAIR[1]
        a = (x_star - math.log(12.0 * depth)) / 2.0 - base.b * depth
        self.config = dataclasses.replace(base, a=a)
        self.lr = LR if self.config.lr_penalty > 0 else None
        self.truth = mean_sign_changes(self.config, *PAIR, lr=self.lr)
        self.seed_base = 1000 * replicate
        self.cache: dict[tuple[int, float, int], TrialRecord] = {}
        self.trainings = 0

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
        order = transitions.seed_sequence(GRID_SEEDS, seeds)[:seeds]
        deep = {s: self.record(PAIR[1], budget, s) for s in order}
        shallow = {s: self.record(PAIR[0], budget, s) for s in order}
        sizes = (math.log(budget), int(math.sqrt(budget / 216)), int(math.sqrt(budget / 144)))
        trend = SizeTrend([], [])  # both nets at exactly the budget's size
        point = pair_points.make_point(budget, sizes, deep, shallow, trend, kind, seeds)
        return dataclasses.replace(point, verified=verified)

    def grid(self) -> list[PairPoint]:
        return [self.point(b, len(GRID_SEEDS), "grid") for b in BUDGETS]

    @property
    def prior(self) -> float:
        return paired_noise_sd(self.config, *PAIR)  # what dwtune.study.refine.noise_prior gives


# --------------------------------------------------------------------------- the new rule


def evaluate(sim, context, budget, kind, start, verified, refine=REFINE) -> PairPoint:
    """PairRefiner._evaluate: seeds until the sign is decided or max_seeds."""
    wanted = start
    while True:
        point = sim.point(budget, wanted, kind, verified)
        merged = pair_points.merge_points(context, [point])
        point = next(
            p for p in transitions.decide_points(merged, refine, sim.prior) if p.budget == budget
        )
        if transitions.point_done(point, kind, wanted, refine):
            return point
        wanted = transitions.seeds_wanted(point.decision, wanted, refine)


def refine_new(sim: SimulatedPair, refine=REFINE):
    """PairRefiner.rounds: verify, bisect, re-verify, then the transition."""
    grid, later, rounds = sim.grid(), [], 0
    while True:
        points = transitions.decide_points(pair_points.merge_points(grid, later), refine, sim.prior)
        step = transitions.next_step(points, refine, rounds)
        if step.kind == "done":
            break
        if step.kind in ("bisect", "scan"):
            rounds += step.kind == "bisect"
            budget, start, verified = math.exp(step.log_n), max(refine.seeds, step.seeds), False
        else:
            budget = step.point.budget
            start = max(refine.seeds, step.seeds, step.point.requested)
            verified = step.reason == "re-verify"
        later.append(evaluate(sim, points, budget, step.kind, start, verified, refine))
    return transitions.make_transition(
        PAIR, step.outcome, points, trials=0, rounds=rounds, simulated=True,
        prior=sim.prior, z=refine.noise_z,
    )  # fmt: skip


# --------------------------------------------------------------------------- today's rule (copy)


class OldRule:
    """The refine decision before issue 10 (z-test at every look, first negative point,
    bracket midpoint), kept for the trainings-per-pair comparison only."""

    MIN_POOLED_DOF = 10

    @staticmethod
    def pooled_sd(groups, prior):
        squares, dof = 0.0, 0
        for deltas in groups:
            if len(deltas) >= 2:
                squares += float(np.sum((np.asarray(deltas) - np.mean(deltas)) ** 2))
                dof += len(deltas) - 1
        if dof == 0:
            return prior
        pooled = math.sqrt(squares / dof)
        return pooled if dof >= OldRule.MIN_POOLED_DOF else max(pooled, prior)

    @staticmethod
    def decide(point: PairPoint, sd: float) -> PairPoint:
        finite = [d for d in point.deltas if math.isfinite(d)]  # failures were dropped
        decision = pair_points.decide(finite, sd, REFINE.noise_z)
        return dataclasses.replace(point, deltas=tuple(finite), decision=decision)

    @staticmethod
    def outcome(points: Sequence[PairPoint]):
        usable = [p for p in points if not p.within_noise(REFINE.max_seeds)]
        first = next((i for i, p in enumerate(usable) if p.decision.mean < 0), None)
        if not usable or first is None or first == 0:
            return None
        return usable[first - 1], usable[first]

    @classmethod
    def refine(cls, sim: SimulatedPair):
        grid = sim.grid()
        sd = cls.pooled_sd([g.deltas for g in grid], sim.prior)
        grid = [cls.decide(g, sd) for g in grid]
        later, rounds = [], 0
        while True:
            points = pair_points.merge_points(grid, later)
            bracket = cls.outcome(points)
            if bracket is None:
                return None, points
            pending = [p for p in bracket if not p.decision.decided]
            low, high = bracket[0].log_n, bracket[1].log_n
            inside = [
                p for p in points if p.within_noise(REFINE.max_seeds) and low < p.log_n < high
            ]
            if pending:
                budget, kind, start = pending[0].budget, "verify", max(1, pending[0].requested)
            elif (
                math.exp(high - low) - 1 <= REFINE.tolerance
                or rounds >= REFINE.max_rounds
                or len(inside) >= 2
            ):
                return bracket, points
            else:
                rounds += 1
                budget = math.exp(transitions.proposal(low, high, [p.log_n for p in inside]))
                kind, start = "bisect", REFINE.seeds
            others = [p.deltas for p in points if p.budget != budget]
            wanted = start
            while True:
                raw = sim.point(budget, wanted, kind)
                point = cls.decide(raw, cls.pooled_sd([*others, raw.deltas], sim.prior))
                if point.decision.decided or wanted >= REFINE.max_seeds:
                    break
                wanted = transitions.seeds_wanted(point.decision, wanted, REFINE)
            later.append(point)


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


def point_sign(sim: SimulatedPair, log_n: float) -> int:
    """Sign the sequential rule gives a fresh point at ``log_n`` beside the pair's grid."""
    grid = transitions.decide_points(sim.grid(), REFINE, sim.prior)
    point = evaluate(sim, grid, math.exp(log_n), "bisect", REFINE.seeds, False)
    return point.decision.sign


# --------------------------------------------------------------------------- one surface


def nearest_truth(sim: SimulatedPair, n_star: float) -> float:
    return min(sim.truth, key=lambda t: abs(math.log(t / n_star)))


def run_surface(name: str, pairs: int, seed: int, old: bool) -> dict:
    base = SimulatedConfig(**SURFACES[name])
    rng = np.random.default_rng([seed, list(SURFACES).index(name)])
    stats = {"name": name, "status": {}, "in68": 0, "in95": 0, "errors": [], "trainings": []}
    stats |= {"zero": [0, 0], "quarter": [0, 0], "old": {"trainings": [], "in": 0, "n": 0}}
    for replicate in range(pairs):
        sim = SimulatedPair(base, replicate, rng)
        t = refine_new(sim)
        stats["status"][t.status] = stats["status"].get(t.status, 0) + 1
        stats["trainings"].append(sim.trainings)
        if t.status == vocabulary.TransitionStatus.BRACKETED:
            truth = nearest_truth(sim, t.n_star)
            stats["in68"] += t.n_star_low_68 <= truth <= t.n_star_high_68
            stats["in95"] += t.n_star_low <= truth <= t.n_star_high
            stats["errors"].append(abs(math.log(t.n_star / truth)))
        tested = SimulatedPair(base, replicate + pairs, rng)  # fresh seeds for the point tests
        stats["zero"][0] += point_sign(tested, math.log(tested.truth[-1])) != 0
        stats["zero"][1] += 1
        sd = paired_noise_sd(tested.config, *PAIR)
        for target in (0.25 * sd, -0.25 * sd):
            x = size_where(tested, target)
            if x is not None:
                stats["quarter"][0] += point_sign(tested, x) == -np.sign(target)
                stats["quarter"][1] += 1
        if old:
            stats["old"] = _old_pair(sim, stats["old"])
    return stats


def _old_pair(new_sim: SimulatedPair, acc: dict) -> dict:
    sim = copy.copy(new_sim)  # the very same planted pair and seeds, trained afresh
    sim.cache, sim.trainings = {}, 0
    bracket, points = OldRule.refine(sim)
    acc["trainings"].append(sim.trainings)
    if bracket is not None:
        low, high = bracket[0].log_n, bracket[1].log_n
        truth = math.log(nearest_truth(sim, math.exp(0.5 * (low + high))))
        near = [p for p in points if p.n]
        slope = np.polyfit([p.log_n for p in near], [p.decision.mean for p in near], 1)[0]
        se = max(bracket[0].decision.se, bracket[1].decision.se)
        sigma = math.hypot(0.5 * (high - low), se / abs(slope))
        acc["in"] += abs(0.5 * (low + high) - truth) <= 1.96 * sigma
        acc["n"] += 1
    return acc


# --------------------------------------------------------------------------- report


def binomial(hits: int, total: int) -> str:
    if not total:
        return "   n/a"
    rate = hits / total
    return f"{100 * rate:5.1f}% ± {100 * math.sqrt(rate * (1 - rate) / total):3.1f} (n={total})"


def report(stats: dict, pairs: int) -> list[str]:
    status = stats["status"]
    bracketed = status.get(vocabulary.TransitionStatus.BRACKETED, 0)
    shares = ", ".join(f"{k} {100 * v / pairs:.0f}%" for k, v in sorted(status.items()))
    trainings = np.asarray(stats["trainings"])
    lines = [
        f"{stats['name']}:",
        f"  status: {shares}",
        f"  coverage where bracketed: 68% {binomial(stats['in68'], bracketed)}, "
        f"95% {binomial(stats['in95'], bracketed)}; median |ln N*/N*_true| "
        f"{np.median(stats['errors']) if stats['errors'] else math.nan:.4f}",
        f"  false-sign rate at Δ = 0: {binomial(*stats['zero'])}; wrong sign at |Δ| = 0.25 sd: "
        f"{binomial(*stats['quarter'])}",
        f"  trainings per pair: mean {trainings.mean():.1f} (grid {2 * len(BUDGETS)} + refine), "
        f"max {trainings.max()}",
    ]
    old = stats["old"]
    if old["trainings"]:
        lines.append(
            f"  today's rule on the same pairs: trainings per pair "
            f"{np.mean(old['trainings']):.1f}; "
            f"its ±1.96σ covers the truth {binomial(old['in'], old['n'])}"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200, help="simulated pairs per surface")
    parser.add_argument("--seed", type=int, default=0, help="seed of the planted N* draws")
    parser.add_argument("--surfaces", nargs="*", default=list(SURFACES), choices=list(SURFACES))
    parser.add_argument("--jobs", type=int, default=1, help="processes (surfaces in parallel)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    print(
        f"SIMULATED: {args.pairs} pairs per surface, pair {PAIR}, seed {args.seed}; refine "
        f"alpha {REFINE.alpha} (Pocock-type α-spending over {REFINE.max_seeds} looks)"
    )
    tasks = [(name, args.pairs, args.seed, name == "default") for name in args.surfaces]
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(run_surface, *zip(*tasks, strict=True)))
    else:
        results = [run_surface(*task) for task in tasks]
    for stats in results:
        print("\n".join(report(stats, args.pairs)))
    print(f"wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
