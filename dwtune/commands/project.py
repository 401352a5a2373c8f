"""dwtune project: optimal depth and width for a budget, and the transition size of a depth.

The law comes from one of: an experiment directory (fitted from its transitions), ``--fit``
(a fit.json, transitions.parquet or depth,width,width_err CSV), or ``--reference levine2020``
(the paper's published constants; the default when nothing is given). Imports no torch, Ray,
Optuna or matplotlib.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict
from pathlib import Path

from dwtune.commands import argtypes
from dwtune.core.vocabulary import LEVEL, SIMULATED_COLUMN, SIMULATED_LAW_BANNER

DEFAULT_REFERENCE = "levine2020"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    argtypes.completes(
        parser.add_argument("source", nargs="?", metavar="EXPERIMENT_DIR", help="fit this study"),
        argtypes.DIRECTORY,
    )
    parser.add_argument(
        "--budget",
        action="append",
        default=[],
        help="parameters, e.g. 1.75e11, 175B, 1T, 50M; several: 175B,1T or --budget repeated",
    )
    parser.add_argument(
        "--depth", action="append", default=[], help="layers, e.g. 96; several: 48,96"
    )
    parser.add_argument("--reference", help=f"published fit (default {DEFAULT_REFERENCE})")
    parser.add_argument("--fit", metavar="FILE", help="fit.json, transitions.parquet or CSV")
    parser.add_argument(
        "--level", type=argtypes.LEVEL, default=LEVEL, help=f"interval level ({LEVEL})"
    )
    parser.add_argument("--json", action="store_true", help="print the projections as JSON")


def _law(args: argparse.Namespace):
    """(law, simulated) from exactly one of EXPERIMENT_DIR, --fit, --reference (default ref)."""
    from dwtune.core.errors import InputError
    from dwtune.core.projection import reference

    given = [x for x in (args.source, args.fit, args.reference) if x is not None]
    if len(given) > 1:
        raise InputError("choose one law: EXPERIMENT_DIR, --fit FILE or --reference NAME")
    if args.source is None and args.fit is None:
        return reference(args.reference or DEFAULT_REFERENCE), False
    return _study_law(Path(args.source or args.fit))


def _study_law(path: Path):
    from dwtune.core.errors import numeric_input
    from dwtune.core.projection import DepthWidthLaw
    from dwtune.storage.fit_json import law_from_json
    from dwtune.storage.fit_points import load_fit_input

    if path.suffix == ".json":
        return law_from_json(path)
    points = load_fit_input(path)
    with numeric_input(points.source, "check its depth, width and width_err values"):
        fit = points.fit()
    return DepthWidthLaw.from_fit(fit, source=points.source), points.simulated


MAX_DEPTH = 10_000


def _listed(values: list[str]) -> list[str]:
    """Every value of a repeatable flag, each occurrence also split at commas (175B,1T)."""
    return [part.strip() for value in values for part in value.split(",")]


def _depth(text: str) -> float:
    from dwtune.core.errors import InputError

    try:
        depth = float(text)
    except ValueError:
        depth = math.nan
    # Beyond ~10,000 layers exp(2(a + b·L)) overflows a float for any plausible law.
    if not (math.isfinite(depth) and 0 < depth <= MAX_DEPTH):
        raise InputError(
            f"--depth: got {text!r}; expected a positive number of layers up to {MAX_DEPTH:,}"
        )
    return depth


def _interval(lo: float, hi: float, fmt: str) -> str:
    if math.isnan(lo):
        return ""
    return f" [{format(lo, fmt)} to {format(hi, fmt)}]"


def format_budget(p) -> str:
    from dwtune.core.units import format_size

    return (
        f"budget {format_size(p.budget)} ({p.budget:.3g} params): optimal depth {p.depth:.1f}"
        f"{_interval(p.depth_lo, p.depth_hi, '.1f')} layers, width {p.width:,.0f}"
        f"{_interval(p.width_lo, p.width_hi, ',.0f')}"
        + (
            "; below one layer: even a single layer is deeper than optimal here"
            if p.depth < 1
            else ""
        )
    )


def format_depth(p) -> str:
    from dwtune.core.units import format_size

    return (
        f"depth {p.depth:g}: transition size {format_size(p.n_star)} ({p.n_star:.4g} params)"
        f"{_interval(p.n_lo, p.n_hi, '.3g')}, width there {p.width:,.0f}"
        f"{_interval(p.width_lo, p.width_hi, ',.0f')}; below that size {p.depth:g} layers are "
        "deeper than optimal"
    )


def format_law(law, level: float, simulated: bool) -> str:
    note = (
        "published constants, no intervals" if not law.has_intervals else f"{level:.0%} intervals"
    )
    lines = [SIMULATED_LAW_BANNER] if simulated else []
    lines.append(f"law {law.name}: ln dx* = {law.a:.4g} + {law.b:.4g}·L ({note}; {law.source})")
    return "\n".join(lines)


def _check_finite(by_budget, by_depth) -> None:
    """A projection past what a float holds (exp of a huge ln dx*) is refused, not "infT"."""
    from dwtune.core.errors import InputError

    for p in by_budget:
        if not (math.isfinite(p.depth) and math.isfinite(p.width)):
            raise InputError(f"--budget {p.budget:g}: the projection overflows; use a smaller one")
    for p in by_depth:
        if not (math.isfinite(p.n_star) and math.isfinite(p.width)):
            raise InputError(
                f"--depth {p.depth:g}: the transition size overflows a float under this law; "
                f"use a smaller depth"
            )


def run(args: argparse.Namespace) -> int:
    from dwtune.core.errors import InputError, numeric_input
    from dwtune.core.fit import z_value
    from dwtune.core.projection import parse_budget, project_budget, project_depth
    from dwtune.storage.fit_json import json_ready

    z_value(args.level)  # a bad --level fails before any file is read
    budgets = [parse_budget(b, field="--budget") for b in _listed(args.budget)]
    depths = [_depth(d) for d in _listed(args.depth)]
    if not budgets and not depths:
        raise InputError("give at least one --budget (e.g. --budget 175B) or --depth (e.g. 96)")
    law, simulated = _law(args)
    with numeric_input(law.source, "check the fit's coefficients, or use --reference"):
        by_budget = [project_budget(law, n, args.level) for n in budgets]
        by_depth = [project_depth(law, d, args.level) for d in depths]
    _check_finite(by_budget, by_depth)
    if args.json:
        out = {"law": asdict(law), SIMULATED_COLUMN: simulated, "level": args.level}
        out |= {"budgets": [asdict(p) for p in by_budget], "depths": [asdict(p) for p in by_depth]}
        print(json.dumps(json_ready(out), indent=2))
        return 0
    print(format_law(law, args.level, simulated))
    for line in [format_budget(p) for p in by_budget] + [format_depth(p) for p in by_depth]:
        print(line)
    return 0
