"""dwtune plan SPEC: every grid cell of a spec, before anything trains (no Ray, no torch).

Also: the corpus against the training length (a study that would read its training split more
than data.max_epochs times is refused), the reference law's transitions against the budgets,
per-trial memory and GPU packing, and with ``--cost`` the study's FLOPs, GPU-hours and wall time.
"""

from __future__ import annotations

import argparse
import json

from dwtune.core.budget import BUDGET_TOLERANCE, GridCell, depth_threshold, flops_per_token
from dwtune.core.errors import InputError
from dwtune.core.spec import ExperimentSpec, load_spec
from dwtune.core.units import format_size
from dwtune.core.vocabulary import SIMULATED_LABEL, Trainer

COLUMNS = (
    ("depth", "L", "{:>4}"),
    ("budget", "budget", "{:>7}"),
    ("width", "width", "{:>6}"),
    ("heads", "heads", "{:>5}"),
    ("head_dim", "hdim", "{:>5}"),
    ("params_non_embedding", "12·L·dx²", "{:>9}"),
    ("params_total", "total", "{:>8}"),
    ("budget_error_pct", "err%", "{:>6}"),
    ("flops_per_token", "FLOPs/tok", "{:>9}"),
    ("depth_threshold", "L_th", "{:>5}"),
    ("regime", "regime", "{:<13}"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="experiment spec, e.g. search_spaces/quickstart.yaml")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.add_argument("--cost", action="store_true", help="estimate FLOPs, GPU-hours, wall time")
    parser.add_argument("--device", default=None, help="GPU for cost and packing: h100, h200, ...")
    parser.add_argument("--peak-flops", type=float, default=None, help="peak FLOP/s per GPU")
    parser.add_argument(
        "--mfu", type=float, default=None, help="MFU (default: dwtune bench results, else 0.3)"
    )
    parser.add_argument("--gpus", type=int, default=1, help="GPUs for the wall time (default 1)")


def cell_row(cell: GridCell) -> dict:
    """One plan row; ``regime`` says whether the depth is above L_th = log3(width)."""
    threshold = depth_threshold(cell.shape.width)
    return {
        "depth": cell.depth,
        "budget": cell.budget,
        "width": cell.shape.width,
        "heads": cell.shape.heads,
        "head_dim": cell.shape.head_dim,
        "params_non_embedding": cell.params_non_embedding,
        "params_total": cell.params_total,
        "size": cell.size,
        "budget_error_pct": round(100 * cell.budget_error, 2),
        "within_tolerance": abs(cell.budget_error) <= BUDGET_TOLERANCE,
        "flops_per_token": flops_per_token(cell.shape),
        "depth_threshold": round(threshold, 2),
        "regime": "above L_th" if cell.depth > threshold else "below L_th",
    }


def plan_rows(spec: ExperimentSpec) -> list[dict]:
    return [cell_row(cell) for cell in spec.grid()]


def _render(row: dict) -> list[str]:
    values = dict(row)
    for key in ("budget", "params_non_embedding", "params_total", "flops_per_token"):
        values[key] = format_size(row[key])
    err = f"{row['budget_error_pct']:+.1f}"
    values["budget_error_pct"] = err if row["within_tolerance"] else err + "*"
    return [fmt.format(values[key]) for key, _, fmt in COLUMNS]


def format_table(spec: ExperimentSpec, rows: list[dict]) -> str:
    header = [
        fmt.replace(">", "<" if i == len(COLUMNS) - 1 else ">").format(title)
        for i, (_, title, fmt) in enumerate(COLUMNS)
    ]
    lines = [
        f"{spec.name}: {len(rows)} cells x {len(spec.space.seeds)} seed(s) = "
        f"{len(rows) * len(spec.space.seeds)} trainings; trainer {spec.trainer}"
        + (f" ({SIMULATED_LABEL} loss surface)" if spec.trainer == Trainer.SIMULATED else ""),
        f"size convention {spec.model.size_convention}; width step "
        f"lcm(heads={spec.model.heads}, multiple={spec.model.width_multiple})",
        "  ".join(header),
    ]
    lines += ["  ".join(_render(row)) for row in rows]
    missed = sum(not r["within_tolerance"] for r in rows)
    lines.append(
        f"* {missed} cell(s) miss their budget by more than {BUDGET_TOLERANCE:.0%}: the width "
        f"step is too coarse there (lower model.width_multiple to tighten)"
        if missed
        else f"every cell is within {BUDGET_TOLERANCE:.0%} of its budget"
    )
    return "\n".join(lines)


def checks(args: argparse.Namespace, spec: ExperimentSpec) -> dict:
    """Corpus, coverage and packing lines (and cost with --cost); raises on a refused study."""
    from dwtune.commands import planning
    from dwtune.core.projection import reference
    from dwtune.core.scale import coverage_warnings, epoch_problem

    corpus = planning.corpus_size(spec)
    problem = epoch_problem(spec, corpus) if spec.trainer == "torch" else None
    if problem:
        raise InputError(problem)
    return {
        "corpus": planning.corpus_lines(spec, corpus),
        "warnings": coverage_warnings(spec, reference(spec.fit.reference)),
        "packing": planning.packing_lines(spec, args.device),
        "cost": planning.cost_lines(args, spec) if args.cost else [],
    }


def run(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec)
    rows = plan_rows(spec)
    extra = checks(args, spec)
    if args.json:
        print(
            json.dumps(
                {
                    "name": spec.name,
                    "trainer": spec.trainer,
                    "seeds": list(spec.space.seeds),
                    "cells": rows,
                    **extra,
                },
                indent=2,
            )
        )
    else:
        print(format_table(spec, rows))
        for line in extra["corpus"] + extra["packing"]:
            print(line)
        for line in extra["warnings"]:
            print(f"warning: {line}")
        for line in extra["cost"]:
            print(line)
    return 0
