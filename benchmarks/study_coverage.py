"""Calibration of a whole simulated study: its pairs' N* and its law fit, over noise realisations.

SIMULATED DATA. ``benchmarks/coverage.py`` measures one pair's intervals; this runs the whole
study of a simulated spec (default ``search_spaces/simulated.yaml``) once per noise realisation:
its grid and refine trainings in process (:func:`~dwtune.study.refine.refine_in_process`: the
refine stage itself, without Ray; the simulated backend is deterministic, so these are the
records a Ray run writes), its transitions exported, and the law fitted by the study's own fit
(:func:`dwtune.study.fit_stage.fit_experiment`, the interval-censored likelihood). Realisation ``k``
replaces the spec's grid seeds by ``1000 + 100·k + i`` (the refine stage counts up from them);
the spec's own seeds are run too, as the shipped realisation.

Printed: per pair, the mean error of ln N* against the planted one (with its Monte Carlo error),
the rms of its z = error / σ(ln N*), and the coverage of its 68% and 95% intervals; for the fit,
χ²_red over the realisations against the χ²_ν/ν distribution it should follow if every σ(ln N*)
is right (mean, median, tail shares, and where the shipped realisation falls), and how often the
95% intervals of a and b, and of the optimal depth at each of the spec's ``fit.budgets``
(the report's projection), hold the planted values.

The noise guess (``refine.noise_prior``) is the spec's own unless ``--ratio R`` sets it to the
surface's true paired sd divided by R (R = 5: a guess five times too small); the header says
which ratio ran. The estimator is never handed the true noise as known: the guess is worth
``refine.noise_prior_dof`` pseudo-observations.

    python benchmarks/study_coverage.py --studies 200 --jobs 2 [--ratio 5] [KEY=VALUE ...]

``KEY=VALUE`` overrides the spec, e.g. ``refine.design=law`` (the law
design, :mod:`dwtune.core.refine.design`), or ``simulated.seed_size_correlation=0.8`` (the
surfaces where a seed's luck at a depth persists across sizes: its paired Δ deviation correlated
0.8 between sizes; 0.5 likewise), the same surfaces as ``coverage.py``'s ``seed_sizes_08`` and
``seed_sizes_05``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from scipy import stats
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dwtune.backends.simulated_surface import paired_noise_sd, planted_transition  # noqa: E402
from dwtune.core.errors import InputError  # noqa: E402
from dwtune.core.projection import DepthWidthLaw, optimal_depth, project_budget  # noqa: E402
from dwtune.core.spec import ExperimentSpec, load_spec  # noqa: E402
from dwtune.core.vocabulary import TransitionStatus  # noqa: E402
from dwtune.storage.experiment import ExperimentReader, export_experiment  # noqa: E402
from dwtune.storage.store import ExperimentStore  # noqa: E402
from dwtune.study.fit_stage import fit_experiment, fit_record  # noqa: E402
from dwtune.study.refine import refine_in_process  # noqa: E402

SEED_BASE, SEED_STRIDE = 1000, 100  # realisation k's grid seeds: 1000 + 100·k + i


def realisation(spec: ExperimentSpec, k: int | None) -> ExperimentSpec:
    """The spec with realisation ``k``'s grid seeds (``None``: the spec's own)."""
    if k is None:
        return spec
    seeds = tuple(SEED_BASE + SEED_STRIDE * k + i for i in range(len(spec.space.seeds)))
    return dataclasses.replace(spec, space=dataclasses.replace(spec.space, seeds=seeds))


def run_study(spec: ExperimentSpec) -> dict:
    """One realisation end to end in a scratch folder: per-pair errors and the fit's figures."""
    with tempfile.TemporaryDirectory(prefix="dwtune-study-coverage-") as scratch:
        store = ExperimentStore.for_spec(Path(scratch), spec)
        transitions, runner = refine_in_process(spec, store)
        export_experiment(store)
        experiment = ExperimentReader(store.root).read()
        outcome = fit_experiment(experiment)
        fit = fit_record(experiment, outcome, {})
    return {
        "pairs": [pair_row(spec, t) for t in transitions],
        "chi2_red": fit.get("chi2_red"),
        "dof": fit.get("dof"),
        "a_covered": covers(fit.get("ci_a"), spec.simulated.a),
        "b_covered": covers(fit.get("ci_b"), spec.simulated.b),
        "depth_covered": depth_coverage(spec, outcome.fit),
        "depth_spread": depth_spread(spec, outcome.fit),
        "trainings": runner.trained,
    }


def depth_coverage(spec: ExperimentSpec, fit) -> dict[float, bool]:
    """Per projected budget (the spec's fit.budgets): does the study's 95% interval of the
    optimal depth (the report's own projection) hold the planted law's optimal depth?"""
    if fit is None or fit.b <= 0:
        return {}
    planted = DepthWidthLaw("planted", spec.simulated.a, spec.simulated.b)
    law = DepthWidthLaw.from_fit(fit)
    held = {}
    for budget in spec.fit.budgets:
        projection = project_budget(law, budget)
        held[budget] = projection.depth_lo <= optimal_depth(planted, budget) <= projection.depth_hi
    return held


def depth_spread(spec: ExperimentSpec, fit) -> dict[float, float]:
    """Per projected budget: ln(depth_hi / depth_lo) of the report's 95% interval of the
    optimal depth, what a study's precision buys a user."""
    if fit is None or fit.b <= 0:
        return {}
    law = DepthWidthLaw.from_fit(fit)
    spread = {}
    for budget in spec.fit.budgets:
        projection = project_budget(law, budget)
        if projection.depth_lo > 0 and math.isfinite(projection.depth_hi):
            spread[budget] = math.log(projection.depth_hi / projection.depth_lo)
    return spread


def covers(interval, truth: float) -> bool | None:
    return None if not interval else bool(interval[0] <= truth <= interval[1])


def pair_row(spec: ExperimentSpec, transition) -> dict:
    label = f"{transition.depth_shallow}-{transition.depth_deep}"
    if transition.status != TransitionStatus.BRACKETED:
        return {"pair": label, "status": transition.status}
    truth = planted_transition(spec.simulated, transition.depth_deep)
    return {
        "pair": label,
        "status": transition.status,
        "error": math.log(transition.n_star / truth),
        "sigma": transition.sigma_ln,
        "in68": transition.n_star_low_68 <= truth <= transition.n_star_high_68,
        "in95": transition.n_star_low <= truth <= transition.n_star_high,
    }


def with_ratio(spec: ExperimentSpec, ratio: float | None) -> ExperimentSpec:
    """The spec whose noise guess is the true paired sd ÷ ``ratio`` (None: its own guess)."""
    if ratio is None:
        return spec
    guess = paired_noise_sd(spec.simulated) / ratio
    return dataclasses.replace(spec, refine=dataclasses.replace(spec.refine, noise_prior=guess))


def prior_ratio(spec: ExperimentSpec) -> float:
    """True paired sd ÷ the spec's guess."""
    return paired_noise_sd(spec.simulated) / spec.refine.noise_prior


def _one(spec_path: str, k: int | None, ratio: float | None, overrides: tuple = ()) -> dict:
    return run_study(with_ratio(realisation(load_spec(spec_path, overrides), k), ratio))


def pair_lines(results: Sequence[dict]) -> list[str]:
    rows = [p for r in results for p in r["pairs"]]
    labels = list(dict.fromkeys(p["pair"] for p in rows))
    lines = [
        f"{'pair':<7}{'bracketed':>10}{'mean ln(N*/true)':>22}{'rms z':>7}{'68%':>7}{'95%':>7}"
        f"{'median σ':>10}{'median |err|':>14}"
    ]
    for label in [*labels, "all"]:
        mine = [p for p in rows if label in ("all", p["pair"])]
        ok = [p for p in mine if "error" in p]
        if not ok:
            lines.append(f"{label:<7}{0:>5}/{len(mine):<4}")
            continue
        err = np.array([p["error"] for p in ok])
        z = err / np.array([p["sigma"] for p in ok])
        mc = err.std(ddof=1) / math.sqrt(err.size) if err.size > 1 else math.nan
        lines.append(
            f"{label:<7}{len(ok):>5}/{len(mine):<4}{err.mean():>+12.4f} ± {mc:.4f}"
            f"{math.sqrt(np.mean(z**2)):>7.2f}{np.mean([p['in68'] for p in ok]):>7.1%}"
            f"{np.mean([p['in95'] for p in ok]):>7.1%}"
            f"{np.median([p['sigma'] for p in ok]):>10.4f}{np.median(np.abs(err)):>14.4f}"
        )
    return lines


def fit_lines(results: Sequence[dict], shipped: dict | None) -> list[str]:
    fitted = [r for r in results if r["chi2_red"] is not None and r["dof"]]
    if not fitted:
        return ["fit: no realisation had a fit"]
    chi = np.array([r["chi2_red"] for r in fitted], dtype=float)
    dof = int(np.median([r["dof"] for r in fitted]))
    reference = stats.chi2(dof)
    lines = [
        f"fit χ²_red over {chi.size} realisations (χ²_{dof}/{dof} if every σ(ln N*) is right): "
        f"mean {chi.mean():.2f} (1.00), median {np.median(chi):.2f} "
        f"({reference.median() / dof:.2f}), max {chi.max():.2f}"
    ]
    for tail in (0.05, 0.01):
        cut = reference.ppf(1.0 - tail) / dof
        lines.append(f"  share above {cut:.2f}: {np.mean(chi > cut):.3f} ({tail:.3f})")
    if shipped is not None and shipped["chi2_red"] is not None:
        value = shipped["chi2_red"]
        lines.append(
            f"  the spec's own seeds: χ²_red {value:.2f}; realisations above it "
            f"{np.mean(chi > value):.3f}, χ²_{dof}/{dof} above it {reference.sf(value * dof):.4f}"
        )
    for name in ("a", "b"):
        held = [r[f"{name}_covered"] for r in fitted if r[f"{name}_covered"] is not None]
        share = float(np.mean(held))
        se = math.sqrt(share * (1.0 - share) / len(held))
        lines.append(f"  95% interval of {name} holds the planted {name}: {share:.1%} ± {se:.1%}")
    for budget in dict.fromkeys(b for r in fitted for b in r["depth_covered"]):
        held = [r["depth_covered"][budget] for r in fitted if budget in r["depth_covered"]]
        share = float(np.mean(held))
        se = math.sqrt(share * (1.0 - share) / len(held))
        spread = [r["depth_spread"][budget] for r in fitted if budget in r["depth_spread"]]
        lines.append(
            f"  95% interval of the optimal depth at {budget:.3g} holds the planted one: "
            f"{share:.1%} ± {se:.1%}; median ln(high/low) {np.median(spread):.3f}"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default=str(ROOT / "search_spaces" / "simulated.yaml"))
    parser.add_argument("--studies", type=int, default=100, help="noise realisations (100)")
    parser.add_argument("--start", type=int, default=0, help="first realisation index (0)")
    parser.add_argument("--jobs", type=int, default=1, help="processes (1)")
    parser.add_argument(
        "--ratio", type=float, default=None,
        help="set the noise guess to the true paired sd ÷ RATIO (default: the spec's own guess)",
    )  # fmt: skip
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE",
        help="spec overrides, e.g. refine.design=law",
    )  # fmt: skip
    args = parser.parse_args(argv)
    overrides = tuple(args.overrides)
    try:
        spec = load_spec(args.spec, overrides)
    except InputError as exc:
        parser.exit(2, f"study_coverage: {exc}\n")
    if spec.trainer != "simulated":
        parser.exit(
            2,
            f"study_coverage: {args.spec} trains with {spec.trainer!r}; pass a spec with "
            "trainer: simulated (each study here runs hundreds of trainings)\n",
        )
    if args.studies < 1 or args.jobs < 1:
        parser.exit(2, "study_coverage: --studies and --jobs must be at least 1\n")
    if args.ratio is not None and not args.ratio > 0:
        parser.exit(2, f"study_coverage: --ratio {args.ratio}: expected a positive number\n")
    started = time.perf_counter()
    keys: list[int | None] = [None, *range(args.start, args.start + args.studies)]
    with ProcessPoolExecutor(args.jobs) as pool:
        count = len(keys)
        jobs = pool.map(_one, [args.spec] * count, keys, [args.ratio] * count, [overrides] * count)
        done = list(tqdm(jobs, total=len(keys), desc="studies", unit="study", file=sys.stderr))
    shipped, results = done[0], done[1:]
    ratio = prior_ratio(with_ratio(spec, args.ratio))
    print(
        f"SIMULATED: {args.studies} noise realisations of {spec.name} ({args.spec}"
        f"{' ' + ' '.join(overrides) if overrides else ''}); noise "
        f"guess {with_ratio(spec, args.ratio).refine.noise_prior:.4g} nats (true paired sd ÷ "
        f"{ratio:.3g}), worth {spec.refine.noise_prior_dof:g} pseudo-observations"
    )
    print("\n".join(pair_lines(results)))
    print("\n".join(fit_lines(results, shipped)))
    print(f"trainings per study: mean {np.mean([r['trainings'] for r in results]):.1f}")
    print(f"wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
