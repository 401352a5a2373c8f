"""dwtune fit: fit ln dx* = a + b·L to an experiment's transitions or to a published table.

Reads an experiment directory (its transitions.parquet), a transitions Parquet file, or a CSV
with columns depth,width,width_err. Prints the fit and, for a transitions table, the competing
laws fitted to the same pairs with the one the data prefer (``competing_laws``); ``--json``
prints the same as fit.json.
Imports no torch, Ray, Optuna or matplotlib.
"""

from __future__ import annotations

import argparse
import json

from dwtune.commands import argtypes
from dwtune.core.vocabulary import LEVEL, SIMULATED_LAW_BANNER

LEVEL_HELP = f"confidence level of the printed intervals (default {LEVEL})"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    target = parser.add_argument(
        "target",
        metavar="EXPERIMENT_DIR|transitions.parquet|table.csv",
        help="experiment directory, its transitions.parquet, or a CSV of depth,width,width_err",
    )
    argtypes.completes(target, argtypes.FILE)
    parser.add_argument("--level", type=argtypes.LEVEL, default=LEVEL, help=LEVEL_HELP)
    parser.add_argument("--json", action="store_true", help="print the fit as JSON (as fit.json)")


def format_fit(fit, level: float, simulated: bool, source: str) -> str:
    """Human summary: coefficients with errors and intervals, quality, unfitted pairs."""
    # scipy (through the intervals) when a fit is printed: the CLI imports every command to
    # build its parser, and `dwtune run` must refuse a wrong --address in seconds
    from dwtune.core.intervals import SCALE_PRIOR_DOF
    from dwtune.core.projection import LEVINE2020

    depths = ", ".join(f"{d:g}" for d in sorted(set(fit.depths)))
    (a_lo, a_hi), (b_lo, b_hi) = fit.interval("a", level), fit.interval("b", level)
    corr = fit.cov[0][1] / (fit.se_a * fit.se_b)
    lines = [SIMULATED_LAW_BANNER] if simulated else []
    censored = f" and {len(fit.censored_fitted)} censored pair(s)" if fit.censored_fitted else ""
    # fit.json's `method`, in words: the censored likelihood fits every study (it equals WLS
    # when no pair is censored); a published table is fitted by WLS.
    method = {
        "censored_mle": "censored_mle: interval-censored likelihood",
        "wls": "wls: weighted least squares",
    }.get(fit.method, fit.method)
    lines += [
        f"fit of ln dx* = a + b·L over {fit.n_points} bracketed transitions{censored} at depths "
        f"{depths} ({method})",
        f"  source: {source}",
        f"  a = {fit.a:.4f} ± {fit.se_a:.4f}   ({level:.0%} interval {a_lo:.4f} to {a_hi:.4f})",
        f"  b = {fit.b:.5f} ± {fit.se_b:.5f}   ({level:.0%} interval {b_lo:.5f} to {b_hi:.5f})",
        f"  cov(a, b) = {fit.cov[0][1]:.3g}   (correlation {corr:+.3f})",
        f"  R² = {fit.r2:.4f}   χ²_red = {fit.chi2_red:.3f} with {fit.dof} dof"
        "   (± errors from the given uncertainties, not scaled by χ²_red; intervals"
        f" ± {fit.quantile(level):.2f} errors: t scaled by the scatter, σ a prior worth "
        f"{SCALE_PRIOR_DOF:g} pseudo-observations)",
    ]
    in_fit = {label.removeprefix("pair ") for label in fit.censored_fitted}
    for c in fit.censored:
        where = "censored, in the fit" if c.pair in in_fit else "not fitted"
        lines.append(f"  {where}: pair {c.pair}: {c.describe()}")
    lines += [f"  excluded: {label}: {why}" for label, why in fit.excluded]
    lines.append(f"published (Levine et al. 2020): a = {LEVINE2020.a}, b = {LEVINE2020.b}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from dwtune.core.errors import numeric_input
    from dwtune.core.fit import z_value
    from dwtune.outputs.competing_laws import competing_lines
    from dwtune.storage.fit_json import COMPETING_LAWS, competing_laws_dict, fit_to_dict
    from dwtune.storage.fit_points import load_fit_input

    z_value(args.level)  # a bad --level fails before any file is read
    points = load_fit_input(args.target)
    with numeric_input(points.source, "check its depth, width and width_err values"):
        fit = points.fit()
        text = format_fit(fit, args.level, points.simulated, points.source)
        competing = competing_laws_dict(points.observations)
    if args.json:
        record = fit_to_dict(fit, args.level, points.simulated, points.source, points.seeds)
        print(json.dumps(record | {COMPETING_LAWS: competing}, indent=2))
    else:
        print("\n".join([text, *competing_lines(competing)]))
    return 0
