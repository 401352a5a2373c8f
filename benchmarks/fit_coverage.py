"""Coverage and bias of the law fit itself (Monte Carlo on simulated transitions; seconds).

Each simulated study has six pairs (deeper depths 12, 18, 24, 30, 36, 48) on the planted law
ln dx* = 5.039 + 0.0555·L; each pair's ln N* estimate is the truth plus σ·ε (ε standard
normal). The range's largest size is set so that the chosen number of pairs' transitions lie
above it on average: those come out ``censored_high`` (their estimate exceeded the bound) about
half the time. Both fits run on every study:

- old: weighted least squares on the bracketed pairs only (censored ones dropped);
- new: the interval-censored likelihood with every pair (dwtune.core.fit.censored).

Printed per fit: mean bias of a and b (with its Monte Carlo error), coverage of the 95%
intervals of a and b (the fit's rule, :func:`dwtune.core.intervals.interval_quantile`: with
exact σ it over-covers a little, 96.1% on 4 dof), and how many studies had 1 or more censored
pairs. ``--studies`` and ``--seed`` size the run; ``--misstated F`` makes the estimates err by
F times the σ the fit is told (the σ's scale is a prior, learned from the scatter).

    python benchmarks/fit_coverage.py --studies 2000 --censored 2 [--misstated 0.5]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dwtune.core.fit import TransitionObservation, fit_law, fit_transitions
from dwtune.core.intervals import SCALE_PRIOR_DOF

A, B = 5.039, 0.0555
PAIRS = ((6, 12), (12, 18), (18, 24), (24, 30), (30, 36), (36, 48))


def log_n_star(depth: float) -> float:
    return math.log(12.0 * depth) + 2.0 * (A + B * depth)


def study(rng, upper: float, sigma: float, misstated: float) -> list[TransitionObservation]:
    """One study; each estimate errs by ``misstated·σ·ε`` while the fit is told σ."""
    out = []
    for shallow, deep in PAIRS:
        estimate = log_n_star(deep) + misstated * sigma * rng.normal()
        label = f"{shallow}-{deep}"
        if estimate > upper:
            out.append(TransitionObservation(label, shallow, deep, "censored_high", upper))
        else:
            out.append(TransitionObservation(label, shallow, deep, "bracketed", estimate, sigma))
    return out


def old_fit(observations):
    kept = [o for o in observations if o.status == "bracketed"]
    depth = np.array([o.depth_deep for o in kept])
    width = np.exp([o.log_width for o in kept])
    errs = width * np.array([o.sigma_log_width for o in kept])
    return fit_transitions(depth, width, errs)


def run(
    studies: int, seed: int, censored: int, sigma: float, misstated: float = 1.0
) -> dict[str, np.ndarray]:
    """Per fit, rows of (a, b, a covered, b covered) over the studies; plus censored counts."""
    rng = np.random.default_rng(seed)
    # The bound sits at the planted N* of the `censored`-th largest pair (0: no bound).
    upper = log_n_star(PAIRS[-censored][1]) if censored else math.inf
    rows = {"old WLS (bracketed only)": [], "censored likelihood": []}
    counts = []
    for _ in range(studies):
        obs = study(rng, upper, sigma, misstated)
        counts.append(sum(o.status != "bracketed" for o in obs))
        for name, fit in (("old WLS (bracketed only)", old_fit), ("censored likelihood", fit_law)):
            result = fit(obs)
            (a_lo, a_hi), (b_lo, b_hi) = result.interval("a"), result.interval("b")
            rows[name].append((result.a, result.b, a_lo <= A <= a_hi, b_lo <= B <= b_hi))
    return {k: np.array(v, dtype=float) for k, v in rows.items()} | {"censored": np.array(counts)}


def report(results: dict[str, np.ndarray], studies: int, misstated: float = 1.0) -> list[str]:
    counts = results.pop("censored")
    band = 3.0 * math.sqrt(0.95 * 0.05 / studies)
    lines = [
        f"{studies} studies; censored pairs per study: "
        + ", ".join(f"{k}: {np.mean(counts == k):.0%}" for k in range(int(counts.max()) + 1)),
        f"the estimates err by {misstated:g} × the σ the fit is given; 95% intervals by the "
        f"fit's rule t_n·s (n = {SCALE_PRIOR_DOF:g} + dof, the σ's scale learned from the "
        f"scatter); 3σ binomial band ±{band:.3f}",
        f"{'fit':<28}{'bias a':>18}{'bias b':>20}{'cover a':>9}{'cover b':>9}",
    ]
    for name, rows in results.items():
        mc = rows[:, :2].std(axis=0, ddof=1) / math.sqrt(len(rows))
        bias_a, bias_b = rows[:, 0].mean() - A, rows[:, 1].mean() - B
        lines.append(
            f"{name:<28}{bias_a:>+10.4f} ±{mc[0]:.4f}{bias_b:>+12.5f} ±{mc[1]:.5f}"
            f"{rows[:, 2].mean():>9.3f}{rows[:, 3].mean():>9.3f}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=2000, help="simulated studies (2000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (0)")
    parser.add_argument(
        "--censored", type=int, default=1, choices=(0, 1, 2),
        help="pairs whose planted N* is at or above the range's top (1)",
    )  # fmt: skip
    parser.add_argument("--sigma", type=float, default=0.2, help="σ(ln N*) of a pair (0.2)")
    parser.add_argument(
        "--misstated", type=float, default=1.0,
        help="true error sd ÷ the σ the fit is given (1: exact; 2: σ twice too small)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if not (args.misstated > 0 and args.sigma > 0 and args.studies > 0):
        parser.exit(2, "fit_coverage: --misstated, --sigma and --studies must be positive\n")
    results = run(args.studies, args.seed, args.censored, args.sigma, args.misstated)
    print("\n".join(report(results, args.studies, args.misstated)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
