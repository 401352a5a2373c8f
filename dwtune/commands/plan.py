"""dwtune plan SPEC: every grid cell of a spec, before anything trains (no Ray, no torch).

Also: the corpus against the training length (a study that would read its training split more
than data.max_epochs times is refused), the reference law's transitions against the budgets,
per-trial memory, micro-batches and GPU packing, and with ``--cost`` the study's FLOPs,
GPU-hours and wall time.

Exit codes: 0 the study can run; 3 (``REFUSED_EXIT``) the plan is printed but `dwtune run`
would refuse the study before launch (a missing corpus, too many epochs, a trial that fits its
GPU at no micro-batch): the reasons are the ``refusals`` of ``--json``; 2 bad input.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from dwtune.commands import argtypes
from dwtune.core.budget import BUDGET_TOLERANCE
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
    ("regime", "regime", "{:<11}"),
    ("split", "mbatch", "{:>10}"),
    ("fused_seeds", "fused", "{:>5}"),
)


EPILOG = (
    "exit codes: 0 the study can run; 3 `dwtune run` would refuse it before launch (a missing "
    "corpus, too many epochs, a cell that fits its GPU at no micro-batch; --json lists them "
    "under refusals); 2 bad input"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    argtypes.add_spec(parser, "experiment spec, e.g. search_spaces/quickstart.yaml")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.add_argument("--cost", action="store_true", help="estimate FLOPs, GPU-hours, wall time")
    parser.add_argument("--device", default=None, help="GPU for cost and packing: h100, h200, ...")
    parser.add_argument("--peak-flops", type=float, default=None, help="peak FLOP/s per GPU")
    parser.add_argument(
        "--mfu", type=float, default=None, help="MFU (default: dwtune bench results, else 0.3)"
    )
    parser.add_argument("--gpus", type=int, default=1, help="GPUs for the wall time (default 1)")


def _render(row: dict, columns: tuple[tuple[str, str, str], ...] = COLUMNS) -> list[str]:
    values = dict(row)
    for key in ("budget", "params_non_embedding", "params_total", "flops_per_token"):
        values[key] = format_size(row[key])
    err = f"{row['budget_error_pct']:+.1f}"
    values["budget_error_pct"] = err if row["within_tolerance"] else err + "*"
    split = f"{row['micro_batch']}x{row['accumulation']}" if row["accumulation"] > 1 else ""
    split = (split or str(row["micro_batch"])) + ("+ckpt" if row["checkpointing"] else "")
    values["split"] = "no fit" if row["fits"] is False else split
    return [fmt.format(values[key]) for key, _, fmt in columns]


# Shown only when some cell's trials span several workers (resources.workers_per_trial).
WORKERS_COLUMN = ("workers", "workers", "{:>7}")


def _columns(rows: list[dict]) -> tuple[tuple[str, str, str], ...]:
    sharded = any(row.get("workers", 1) > 1 for row in rows)
    return (*COLUMNS[:-2], WORKERS_COLUMN, *COLUMNS[-2:]) if sharded else COLUMNS


def _trainings(
    spec: ExperimentSpec, rows: list[dict[str, Any]], cost: dict[str, Any] | None
) -> str:
    """The first cells' trainings, and where the refine stage's come in: the table lists only
    the cells planned before any result, the cost table (``--cost``) all the study's trainings."""
    seeds = len(spec.space.seeds)
    first = f"{len(rows)} cells x {seeds} seed(s) = {len(rows) * seeds}"
    if not spec.refine.pairs:
        return f"{first} trainings"
    if cost is None:
        return f"{first} first trainings (the refine stage adds more: --cost estimates them)"
    return f"{first} first trainings, about {cost['total']['trainings']} in all with refine"


def format_table(
    spec: ExperimentSpec,
    rows: list[dict],
    cost: dict[str, Any] | None = None,
    refine: str | None = None,
) -> str:
    """The plan's text: its header (``refine``: the refine design's line, when given), then a
    row per first cell."""
    columns = _columns(rows)
    header = [fmt.format(title) for _, title, fmt in columns]
    lines = [
        f"{spec.name}: {_trainings(spec, rows, cost)}; trainer {spec.trainer}"
        + (f" ({SIMULATED_LABEL} loss surface)" if spec.trainer == Trainer.SIMULATED else ""),
        f"size convention {spec.model.size_convention}; width step "
        f"lcm(heads={spec.model.heads}, multiple={spec.model.width_multiple})",
        *([refine] if refine else []),
        "  ".join(header),
    ]
    lines += ["  ".join(_render(row, columns)) for row in rows]
    missed = sum(not r["within_tolerance"] for r in rows)
    if any(r["accumulation"] > 1 or r["checkpointing"] or r["fits"] is False for r in rows):
        lines.append(
            "mbatch: sequences per pass x passes per step (+ckpt: activation checkpointing; "
            "no fit: at no micro-batch)"
        )
    if any(r.get("fused_seeds", 1) > 1 for r in rows):
        lines.append(
            "fused: seeds one trial trains as one model, each seed with its own init, data "
            "order, clipping and record"
        )
    sharded = [r for r in rows if r.get("workers", 1) > 1]
    if sharded:
        lines.append(
            f"{len(sharded)} of {len(rows)} cells shard each trial over its workers "
            f"(FSDP2, a Ray Train job per trial; resources.workers_per_trial "
            f"{spec.resources.workers_per_trial}); their mbatch splits each worker's "
            f"{spec.train.batch_size} / workers rows"
        )
    lines.append(
        f"* {missed} cell(s) miss their budget by more than {BUDGET_TOLERANCE:.0%}: the width "
        f"step is too coarse there (lower model.width_multiple to tighten)"
        if missed
        else f"every cell is within {BUDGET_TOLERANCE:.0%} of its budget"
    )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from dwtune.study import planning

    spec = load_spec(args.spec, args.overrides)
    plan = planning.make_plan(spec, args.device, args.cost, args.peak_flops, args.mfu, args.gpus)
    code = 0 if plan.runnable else planning.REFUSED_EXIT
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2))
        return code
    print(format_table(spec, plan.cells, plan.cost, planning.refine_line(plan.refine)))
    for line in planning.corpus_lines(plan.corpus) + planning.packing_lines(plan.packing):
        print(line)
    for line in plan.warnings:
        print(f"warning: {line}")
    for line in planning.cost_lines(plan.cost) + planning.refusal_lines(plan.refusals):
        print(line)
    return code
