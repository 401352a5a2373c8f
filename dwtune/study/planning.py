"""The plan of a study before anything trains (``dwtune plan``, :func:`dwtune.plan`): every
grid cell with its micro-batches, and what `dwtune run` checks and estimates beyond the grid:
the corpus's size against the training length, the reference transitions against the budgets,
per-trial memory and GPU packing, and (``cost``) the study's FLOPs, GPU-hours and wall time.
Each part is a plain mapping of numbers (the ``--json`` fields), rendered as text by the
``*_lines`` functions; ``refusals`` are what would make `dwtune run` refuse the study before
launch (``dwtune plan`` then exits with :data:`REFUSED_EXIT`). No torch, no Ray."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dwtune.core import cost, memory, scale, sharding
from dwtune.core.budget import (
    BUDGET_TOLERANCE,
    GridCell,
    ModelShape,
    depth_threshold,
    flops_per_token,
)
from dwtune.core.errors import InputError
from dwtune.core.refine.design import design_for
from dwtune.core.spec import BUILTIN_CORPORA, DataConfig, ExperimentSpec
from dwtune.core.units import format_size

if TYPE_CHECKING:  # the estimate runs the refine stage: imported where a cost is asked for
    from dwtune.core.refine.transition import Transition
    from dwtune.study.cost_estimate import RefineEstimate

BENCH_RESULTS = Path(DataConfig().cache_dir).expanduser() / "bench" / "results.jsonl"
# `dwtune plan`'s exit code when `dwtune run` would refuse the study (a missing corpus, too
# many epochs, a trial that fits its GPU at no micro-batch): the plan itself is valid (not 2).
REFUSED_EXIT = 3


def corpus_size(spec: ExperimentSpec) -> scale.CorpusSize:
    """Training tokens from the prepared manifest, else estimated from bytes on disk."""
    from dwtune.backends.data import corpus_files, find_prepared, resolve_data_config
    from dwtune.backends.data.sources import COMPRESSIONS

    data = resolve_data_config(spec.data)
    try:
        files = corpus_files(data)
    except InputError as missing:
        return scale.CorpusSize(None, str(missing))
    prepared = find_prepared(data, files)
    if prepared is not None:
        return scale.CorpusSize(prepared.train_tokens, "prepared manifest", exact=True)
    size = sum(p.stat().st_size for p in files)
    compressed = any(p.suffix in COMPRESSIONS for p in files)
    if data.corpus in BUILTIN_CORPORA:
        size = int(size * 0.93)  # markup stripped: 4,955,588 chars of 5,318,858 bytes
    return scale.estimate_corpus(spec, size, compressed)


def check_scale(spec: ExperimentSpec) -> scale.CorpusSize:
    """Refuse (InputError) a torch study without its corpus, or whose trials would read the
    training split more than data.max_epochs times (the simulated backend reads no data)."""
    corpus = corpus_size(spec)
    if spec.trainer != "torch":
        return corpus
    found = [r for r in refusals(spec, corpus) if r["reason"] != "does_not_fit"]
    if found:
        raise InputError(found[0]["message"])
    return corpus


# --------------------------------------------------------------------------- grid cells


def cell_row(cell: GridCell, split: CellSplit | None = None, fused: int | None = None) -> dict:
    """One plan row; ``regime`` says whether the depth is above L_th = log3(width); with
    ``split``, the cell's workers, micro-batches and memory (:func:`split_fields`); with
    ``fused``, the seeds one trial of the cell trains as one model
    (:func:`dwtune.core.sharding.fused_seeds`)."""
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
        **(split_fields(split, cell.shape) if split else {}),
        **({"fused_seeds": fused} if fused is not None else {}),
    }


def plan_rows(spec: ExperimentSpec, device: str | None = None) -> list[dict]:
    """Every cell's row: ``workers``, the processes (GPUs) one of its trials spans, and the
    micro-batches each runs its rows of the batch in (:func:`cell_split`)."""
    gpu_bytes = gpu_memory_bytes(spec, device)
    seeds = len(spec.space.seeds)
    return [
        cell_row(
            cell,
            cell_split(spec, cell, gpu_bytes),
            sharding.fused_seeds(spec, cell.shape, gpu_bytes, seeds),
        )
        for cell in spec.first_cells()
    ]


# --------------------------------------------------------------------------- corpus


def corpus_info(spec: ExperimentSpec, corpus: scale.CorpusSize) -> dict:
    """The corpus against the training length, as numbers (``plan --json``'s ``corpus``)."""
    return {
        "corpus": spec.data.corpus,
        "missing": corpus.missing,
        "train_tokens": corpus.train_tokens,
        "exact": corpus.exact,  # from the prepared manifest; else estimated from bytes on disk
        "source": corpus.source,
        "tokens_per_trial": scale.tokens_per_trial(spec),
        "epochs": None if corpus.missing else scale.epochs(spec, corpus),
        "max_epochs": spec.data.max_epochs,
    }


def corpus_lines(info: dict) -> list[str]:
    if info["missing"]:
        return [f"corpus MISSING: {info['source']}", "(the plan and cost below do not need it)"]
    return [
        f"corpus {info['corpus']}: {info['train_tokens']:.3g} training tokens "
        f"({info['source']}); each trial trains on {info['tokens_per_trial']:.3g} tokens "
        f"= {info['epochs']:.3g} epochs (data.max_epochs {info['max_epochs']:g})"
    ]


# --------------------------------------------------------------------------- memory, packing


activation_bytes = sharding.activation_bytes


def cell_memory(spec: ExperimentSpec, cell: GridCell, gpu_bytes: int | None = None) -> int:
    """Peak bytes of one process of a trial of ``cell`` with its whole batch at once (one
    worker's, when it is sharded)."""
    workers = sharding.trial_workers(spec, cell.shape, gpu_bytes)
    return sharding.worker_memory(spec, cell.shape, workers)


def gpu_memory_bytes(spec: ExperimentSpec, device: str | None) -> int | None:
    """One GPU's memory (bytes): ``device``'s reported figure (:data:`dwtune.core.cost.DEVICES`)
    capped by resources.gpu_memory_gb, the rule the trainer applies to the device it runs on
    (:func:`dwtune.core.memory.usable_gpu_bytes`); None when neither is known."""
    reported = cost.device_memory(device) if device else None
    return memory.usable_gpu_bytes(reported, spec.resources.gpu_memory_gb)


def trial_share_bytes(spec: ExperimentSpec, device: str | None) -> float | None:
    """What one trial may use of its GPU (bytes); None without GPUs or a known GPU memory."""
    return sharding.share_bytes(spec, gpu_memory_bytes(spec, device))


# How a trial of a cell runs: its workers and each one's micro-batches.
CellSplit = sharding.TrialLayout


def cell_split(spec: ExperimentSpec, cell: GridCell, gpu_bytes: int | None = None) -> CellSplit:
    """The workers and micro-batches the runner and the trainer will choose for ``cell`` (the
    same rule, :func:`dwtune.core.sharding.trial_layout`) on GPUs of ``gpu_bytes``."""
    return sharding.trial_layout(spec, cell.shape, gpu_bytes)


def split_fields(split: CellSplit, shape: ModelShape) -> dict:
    """A cell's ``--json`` fields for its split (per worker when sharded); ``fits`` None: no
    GPU memory to fit."""
    micro = split.split
    estimate = micro.estimate
    return {
        "workers": split.workers,
        "micro_batch": micro.micro_batch,
        "accumulation": micro.accumulation,
        "checkpointing": micro.checkpointing,
        "memory_bytes": estimate.total,
        # its terms (dwtune.core.memory): a sharded worker's fp32 master shard and FSDP2's
        # gathered blocks and reduce-scatter buffers; checkpoints stage in host memory only
        "memory_terms": {
            "weights_and_optimizer": estimate.weights_and_optimizer,
            "gathered": estimate.gathered,
            "activations": estimate.activations,
            "logits": estimate.logits,
            "checkpoint_device": 0,
            "checkpoint_host": memory.checkpoint_host_bytes(shape, split.workers),
        },
        "fits": micro.fits if micro.memory_bytes is not None else None,
    }


def _name(cell: GridCell) -> str:
    return f"trial L{cell.depth} x w{cell.shape.width}"


def _largest(spec: ExperimentSpec, gpu_bytes: int | None) -> tuple[GridCell, int, str]:
    widest = max(spec.first_cells(), key=lambda c: cell_memory(spec, c, gpu_bytes))
    workers = sharding.trial_workers(spec, widest.shape, gpu_bytes)
    what = _name(widest)
    if workers > 1:
        what += f" (each of its {workers} workers)"
    return widest, cell_memory(spec, widest, gpu_bytes), what


def memory_problem(spec: ExperimentSpec, device: str | None = None) -> str | None:
    """The refusal when a trial fits its share of a GPU at no micro-batch (even one sequence
    at a time, checkpointed where allowed) and over no allowed number of workers, else None."""
    gpu_bytes = gpu_memory_bytes(spec, device)
    if trial_share_bytes(spec, device) is None or gpu_bytes is None:
        return None
    splits = [(cell, cell_split(spec, cell, gpu_bytes)) for cell in spec.first_cells()]
    failed = [(cell, split) for cell, split in splits if not split.fits]
    if not failed:
        return None
    cell, split = max(failed, key=lambda item: item[1].worker_bytes)
    what = _name(cell) + (
        f" (each of its {split.workers} workers, micro-batch 1)"
        if split.workers > 1
        else " (micro-batch 1)"
    )
    problem = memory.packing_problem(split.worker_bytes, spec.resources.gpu, gpu_bytes, what)
    return f"{problem} ({len(failed)} of {len(splits)} cells do not fit)"


def check_packing(spec: ExperimentSpec, device: str | None = None) -> None:
    """Refuse (before launch) a study one of whose trials fits its share of a GPU at no
    micro-batch and over no allowed number of workers."""
    problem = memory_problem(spec, device)
    if problem:
        raise InputError(problem)


def packing_info(spec: ExperimentSpec, device: str | None) -> dict | None:
    """How many trials of the grid share a GPU, which run as micro-batches, and which do not
    fit their share even so (``plan --json``'s ``packing``); None without GPUs or a known GPU
    memory."""
    gpu_bytes = gpu_memory_bytes(spec, device)
    share_bytes = trial_share_bytes(spec, device)
    if share_bytes is None or gpu_bytes is None:
        return None
    cells = spec.first_cells()
    fits = [memory.trials_per_gpu(cell_memory(spec, c, gpu_bytes), gpu_bytes) for c in cells]
    share = round(1 / spec.resources.gpu) if spec.resources.gpu < 1 else 1
    widest, need, _ = _largest(spec, gpu_bytes)
    packable = [f for f in fits if f > share]
    suggest = len(packable) == len(fits) and 1 / min(fits) in (0.5, 0.25, 0.125)
    splits = [cell_split(spec, c, gpu_bytes) for c in cells]
    whole_gpu = memory.gpu_share_bytes(gpu_bytes, 1.0)
    too_big = [(c, s) for c, s in zip(cells, splits, strict=True) if not s.fits]
    return {
        "gpu_memory_bytes": gpu_bytes,
        "activation_bytes": activation_bytes(spec),
        "trial_memory_bytes": share_bytes,
        "largest_trial": {"depth": widest.depth, "width": widest.shape.width, "bytes": need},
        "trials_per_gpu_min": min(fits),
        "trials_per_gpu_max": max(fits),
        "resources_gpu": spec.resources.gpu,
        "packed_per_gpu": share,
        "suggested_resources_gpu": 1 / min(fits) if suggest else None,
        "cells": len(cells),
        # of the cells that fit: how many need micro-batches, and checkpointing
        "cells_micro_batched": sum(s.fits and s.split.accumulation > 1 for s in splits),
        "cells_checkpointed": sum(s.fits and s.split.checkpointing for s in splits),
        "cells_sharded": sum(s.workers > 1 for s in splits),
        "cells_too_big": len(too_big),
        # cells whose weights, gradients and AdamW state leave no room on one whole GPU:
        # they need a trial that spans more GPUs (resources.workers_per_trial), not a smaller
        # micro-batch
        "cells_beyond_one_gpu": [
            {
                "depth": c.depth,
                "budget": c.budget,
                "width": c.shape.width,
                "weights_and_optimizer_bytes": s.split.estimate.weights_and_optimizer,
            }
            for c, s in too_big
            if s.workers == 1 and not sharding.worker_split(spec, c.shape, 1, whole_gpu).fits
        ],
        "problem": memory_problem(spec, device),
        "sharded_largest": _largest_sharded(cells, splits),
        "checkpoint_host_bytes": {
            f"workers_{n}": max(
                memory.checkpoint_host_bytes(c.shape, n)
                for c, s in zip(cells, splits, strict=True)
                if s.workers == n
            )
            for n in sorted({s.workers for s in splits})
        },
    }


def _largest_sharded(cells: list[GridCell], splits: list[CellSplit]) -> dict | None:
    """The sharded cell whose worker needs the most memory, with its terms; None if none."""
    sharded = [(c, s) for c, s in zip(cells, splits, strict=True) if s.workers > 1]
    if not sharded:
        return None
    cell, split = max(sharded, key=lambda item: item[1].worker_bytes)
    estimate = split.split.estimate
    return {
        "depth": cell.depth,
        "width": cell.shape.width,
        "workers": split.workers,
        "bytes": estimate.total,
        "weights_and_optimizer": estimate.weights_and_optimizer,
        "gathered": estimate.gathered,
        "activations_and_logits": estimate.activations + estimate.logits,
    }


def _sharded_lines(info: dict) -> list[str]:
    """The largest sharded worker's terms, and where checkpoints stage (module memory doc)."""
    lines = []
    big = info.get("sharded_largest")
    if big:
        gib = 2**30
        lines.append(
            f"  sharded workers (FSDP2: bf16 parameters, fp32 reduction; no autocast copy): the "
            f"largest, L{big['depth']} x w{big['width']} over {big['workers']}, needs "
            f"{big['bytes'] / gib:.1f} GiB = {big['weights_and_optimizer'] / gib:.1f} fp32 "
            f"master shard + {big['gathered'] / gib:.1f} gathered blocks and reduce-scatter "
            f"buffers + {big['activations_and_logits'] / gib:.1f} activations and logits"
        )
    host = info.get("checkpoint_host_bytes") or {}
    parts = []
    if "workers_1" in host:
        parts.append(
            f"one-GPU trials load through host memory (up to {host['workers_1'] / 2**30:.1f} "
            f"GiB of host RAM a trial)"
        )
    sharded = [v for k, v in host.items() if k != "workers_1"]
    if sharded:
        parts.append(
            f"sharded trials save and load each worker's own shards (torch.distributed."
            f"checkpoint; at most {max(sharded) / 2**20:.0f} MiB staged in host memory a worker)"
        )
    if parts:
        lines.append("  checkpoints add no GPU memory: " + "; ".join(parts))
    return lines


def packing_lines(info: dict | None) -> list[str]:
    if info is None:
        return []
    largest = info["largest_trial"]
    lines = [
        # whole-batch figures: the lines below (and the mbatch column) say how the cells that
        # do not fit this way run, in micro-batches or sharded
        f"memory (bf16 activations, AdamW): the largest trial L{largest['depth']} x "
        f"w{largest['width']} needs {largest['bytes'] / 2**30:.1f} GiB at its whole batch in "
        f"one process; on a {info['gpu_memory_bytes'] / 2**30:.1f} GiB GPU between "
        f"{info['trials_per_gpu_min']} and {info['trials_per_gpu_max']} whole-batch trials of "
        f"this grid fit per GPU; resources.gpu = {info['resources_gpu']:g} packs "
        f"{info['packed_per_gpu']} per GPU"
    ]
    if info["suggested_resources_gpu"] is not None:
        lines.append(
            f"  set resources.gpu: {info['suggested_resources_gpu']:g} to pack "
            f"{info['trials_per_gpu_min']} per GPU"
        )
    fit = info["cells"] - info["cells_too_big"]
    lines.append(
        f"  {fit} of {info['cells']} cells fit their {info['trial_memory_bytes'] / 2**30:.1f} "
        f"GiB share: {info['cells_micro_batched']} as micro-batches with gradient accumulation "
        f"({info['cells_checkpointed']} with activation checkpointing; column mbatch)"
    )
    lines += _sharded_lines(info)
    if info["cells_too_big"]:
        beyond = info["cells_beyond_one_gpu"]
        lines.append(
            f"  DOES NOT FIT: {info['cells_too_big']} of {info['cells']} cells exceed their "
            f"share of one GPU even at micro-batch 1; `dwtune run` refuses the study before "
            f"launch: {info['problem']}"
        )
    if info["cells_too_big"] and beyond:
        sizes = sorted({format_size(c["budget"]) for c in beyond})
        lines.append(
            f"  {len(beyond)} cell(s) (budgets {', '.join(sizes)}) do not fit one whole GPU: "
            f"their weights, gradients and AdamW state alone exceed it; they need trials that "
            f"span GPUs (sharded), or smaller space.budgets"
        )
    return lines


# --------------------------------------------------------------------------- refusals


def refusals(
    spec: ExperimentSpec, corpus: scale.CorpusSize, device: str | None = None
) -> list[dict]:
    """Why `dwtune run` would refuse the study before launch, one entry per reason (``plan
    --json``'s ``refusals``): ``reason`` (corpus_missing, too_many_epochs, does_not_fit), the
    spec ``field`` to change, and the one-line ``message`` `dwtune run` prints."""
    found = []
    if spec.trainer == "torch":
        if corpus.missing:
            found.append(_refusal("corpus_missing", "data.corpus", corpus.source))
        epochs = scale.epoch_problem(spec, corpus)
        if epochs:
            found.append(_refusal("too_many_epochs", "data.corpus", epochs))
    fit = memory_problem(spec, device)
    if fit:
        found.append(_refusal("does_not_fit", "resources.gpu", fit))
    return found


def _refusal(reason: str, field: str, message: str) -> dict:
    return {"reason": reason, "field": field, "message": message}


def refusal_lines(found: list[dict]) -> list[str]:
    if not found:
        return []
    return [
        f"`dwtune run` would refuse this study ({len(found)} reason(s); plan exit code "
        f"{REFUSED_EXIT}):",
        *(f"  {r['reason']} ({r['field']}): {r['message']}" for r in found),
    ]


# --------------------------------------------------------------------------- cost


def bench_mfu(device: str | None, results: Path | None = None) -> tuple[float, str] | None:
    """Median MFU of the `dwtune bench` results on a matching CUDA device, with its source."""
    results = results or BENCH_RESULTS
    if not results.exists():
        return None
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    name = (device or "").lower()
    rows = [r for r in rows if r.get("device") == "cuda" and name in r["device_name"].lower()]
    if not rows:
        return None
    return statistics.median(r["mfu"] for r in rows), f"median of {len(rows)} dwtune bench runs"


def trial_flops(spec: ExperimentSpec, cell: GridCell, gpu_bytes: int | None = None) -> float:
    """FLOPs one trial spends, the forward recomputed where it is checkpointed to fit (a cell
    that fits at no micro-batch is costed as trained some other way, without recompute)."""
    steps = spec.train.total_steps(spec.data.seq_len)
    per_eval = spec.train.eval_batches * spec.train.batch_size * spec.data.seq_len
    eval_tokens = (steps // spec.train.eval_every + 1) * per_eval
    split = cell_split(spec, cell, gpu_bytes).split
    recompute = split.checkpointing and split.fits
    return cost.trial_flops(cell.shape, scale.tokens_per_trial(spec), eval_tokens, recompute)


def study_cost(
    spec: ExperimentSpec,
    peak: float,
    mfu: float,
    gpus: int,
    device: str | None = None,
    estimate: RefineEstimate | None = None,
) -> list[cost.StageCost]:
    """Each stage's cost, the refine stage's from ``estimate`` (the simulated twin's run,
    :mod:`dwtune.study.cost_estimate`), run here when not given; a sharded trial holds its workers'
    GPUs (one each) while it runs."""
    from dwtune.core.records import grid_requests
    from dwtune.study.cost_estimate import refine_estimate

    estimate = estimate or refine_estimate(spec)
    per_gpu = round(1 / spec.resources.gpu) if 0 < spec.resources.gpu < 1 else 1
    gpu_bytes = gpu_memory_bytes(spec, device)
    known: dict[GridCell, tuple[float, int]] = {}

    def priced(cell: GridCell) -> tuple[float, int]:
        """(FLOPs, GPUs held) of one trial of ``cell``, each cell's layout solved once."""
        if cell not in known:
            workers = cell_split(spec, cell, gpu_bytes).workers
            known[cell] = (trial_flops(spec, cell, gpu_bytes), workers)
        return known[cell]

    stages = [("grid", [grid_requests(spec)], False), ("refine", estimate.rounds, True)]
    costs = []
    for name, batches, estimated in stages:
        rounds = [[priced(r.cell) for r in batch] for batch in batches]
        flops = [[f for f, _ in batch] for batch in rounds]
        spans = [[w for _, w in batch] for batch in rounds]
        costs.append(cost.stage_cost(name, flops, peak, mfu, gpus, per_gpu, estimated, spans=spans))
    return costs


def cost_info(
    spec: ExperimentSpec,
    device: str | None = None,
    peak_flops: float | None = None,
    mfu: float | None = None,
    gpus: int = 1,
) -> dict:
    """FLOPs, GPU-hours and wall hours per stage (``plan --cost --json``'s ``cost``)."""
    if gpus < 1:
        raise InputError(f"--gpus: got {gpus}; expected an integer >= 1")
    device = device or ("h100" if peak_flops is None else None)
    peak = peak_flops or cost.device_peak(str(device))
    peak_note = f"--peak-flops {peak:.3g}" if peak_flops else f"{device} bf16 dense peak"
    measured = None if mfu else bench_mfu(device)
    used, mfu_note = (
        (mfu, "--mfu")
        if mfu
        else measured or (cost.ASSUMED_MFU, "ASSUMED (no dwtune bench result on this device)")
    )
    if not 0 < used <= 1:
        raise InputError(f"--mfu: got {used}; expected 0 < MFU <= 1")
    from dwtune.study.cost_estimate import refine_estimate

    estimate = refine_estimate(spec)
    stages = study_cost(spec, peak, used, gpus, device, estimate)
    total = _total(stages)
    gpu_bytes = gpu_memory_bytes(spec, device)
    return {
        "peak_flops": peak,
        "peak_source": peak_note,
        "mfu": used,
        "mfu_source": mfu_note,
        "gpus": gpus,
        # GPUs the widest trial holds at once (its workers); wall hours schedule it on them
        "trial_gpus_max": max(cell_split(spec, c, gpu_bytes).workers for c in spec.first_cells()),
        "stages": [dataclasses.asdict(s) for s in stages],
        "total": dataclasses.asdict(total),
        # refine.waves: each wave's pairs; the grid stage trains the first wave's first points
        "waves": [[f"{a}-{b}" for a, b in wave] for wave in design_for(spec).waves()],
        "floor": floor_info(spec, peak, used, total, estimate.transitions),
    }


def floor_info(
    spec: ExperimentSpec,
    peak: float,
    mfu: float,
    planned: cost.StageCost,
    found: Sequence[Transition] = (),
) -> dict:
    """The oracle floor (core/oracle_floor.py) priced as the plan prices its trainings (evaluation
    included), η = floor FLOPs ÷ planned FLOPs, and the precision the plan buys: the median
    σ(ln N*) of the simulated twin's bracketed pairs (``found``) beside the planned GPU-hours
    per pair (``plan --cost --json``'s ``cost.floor``)."""
    from dwtune.core.oracle_floor import efficiency, oracle_floor
    from dwtune.core.projection import reference

    law = reference(spec.fit.reference)
    oracle = oracle_floor(spec, law, lambda cell: trial_flops(spec, cell))
    pairs = [
        {**dataclasses.asdict(p), "gpu_hours": cost.gpu_hours(p.flops, peak, mfu)}
        for p in oracle.pairs
    ]
    count = len(oracle.pairs)
    eta = efficiency(oracle.flops, planned.flops)
    return {
        "law": oracle.law,
        "seeds": oracle.seeds,
        "seeds_source": "refine.seeds" if spec.refine.pairs else "space.seeds",
        "pairs": pairs,
        "flops": oracle.flops,
        "gpu_hours": cost.gpu_hours(oracle.flops, peak, mfu),
        "trainings": oracle.trainings,
        "trainings_per_pair": oracle.trainings_per_pair if count else None,
        "planned_trainings_per_pair": planned.trainings / count if count else None,
        "planned_gpu_hours_per_pair": planned.gpu_hours / count if count else None,
        "sigma_ln_median": median_sigma(found),
        "eta": eta if count and math.isfinite(eta) else None,  # None: no pair, or nothing planned
    }


def median_sigma(found: Sequence[Transition]) -> float | None:
    """Median σ(ln N*) over the bracketed transitions; None without one."""
    sigmas = [t.sigma_ln for t in found if math.isfinite(t.sigma_ln)]
    return statistics.median(sigmas) if sigmas else None


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.3g}%"  # 2.73%, 0.0412%: small η readable


def floor_lines(info: dict | None) -> list[str]:
    """The floor under the cost table: one line per pair, then η."""
    if not info or not info["pairs"]:
        return []
    lines = [
        f"oracle floor: each pair's two depths x {info['seeds']} seed(s) ({info['seeds_source']})"
        f" trained once at {info['law']}'s N*:",
        f"{'pair':<8} {'N*':>9} {'widths':>11} {'trainings':>9} {'FLOPs':>10} {'GPU-hours':>11}",
    ]
    for p in info["pairs"]:
        label, widths = f"{p['shallow']}-{p['deep']}", f"{p['width_shallow']}/{p['width_deep']}"
        lines.append(
            f"{label:<8} {p['n_star']:>9.3g} "
            f"{widths:>11} {p['trainings']:>9,} {p['flops']:>10.3g} {p['gpu_hours']:>11,.1f}"
        )
    lines += [
        f"{'floor':<8} {'':>9} {'':>11} {info['trainings']:>9,} {info['flops']:>10.3g} "
        f"{info['gpu_hours']:>11,.1f}",
        f"η = floor FLOPs ÷ planned FLOPs = {_percent(info['eta'])}; trainings per pair: "
        f"{info['planned_trainings_per_pair']:,.1f} planned, {info['trainings_per_pair']:g} "
        "at the floor",
    ]
    if info.get("sigma_ln_median") is not None:
        lines.append(
            f"precision: median σ(ln N*) = {info['sigma_ln_median']:.3g} e-folds (the simulated "
            f"twin's pairs) for {info['planned_gpu_hours_per_pair']:,.1f} planned "
            "GPU-hours per pair"
        )
    return lines


def cost_lines(info: dict | None) -> list[str]:
    if not info:
        return []
    lines = [
        f"cost at {info['peak_flops'] / 1e12:.0f} TFLOP/s ({info['peak_source']}) x MFU "
        f"{info['mfu']:.0%} ({info['mfu_source']}), on {info['gpus']} GPU(s):",
        f"{'stage':<8} {'trainings':>9} {'FLOPs':>10} {'GPU-hours':>11} {'wall hours':>11}",
    ]
    for s in [*info["stages"], info["total"]]:
        note = "  (estimated: the simulated twin, one realisation)" if s["estimated"] else ""
        lines.append(
            f"{s['stage']:<8} {s['trainings']:>9,} {s['flops']:>10.3g} {s['gpu_hours']:>11,.1f} "
            f"{s['wall_hours']:>11,.1f}{note}"
        )
    return lines + _span_lines(info) + _wave_lines(info) + floor_lines(info.get("floor"))


def _wave_lines(info: dict) -> list[str]:
    """Under the cost table, where refine.waves puts the later waves' first points."""
    waves = info.get("waves") or []
    if len(waves) <= 1:
        return []
    later = "; ".join(", ".join(wave) for wave in waves[1:])
    return [
        f"  refine.waves {len(waves)}: the grid stage trains pairs {', '.join(waves[0])}; "
        f"the first points of {later} are refine trainings, placed by the law fitted on the "
        "waves before (on the twin, where the planted law is the reference, at its sizes)"
    ]


def _span_lines(info: dict) -> list[str]:
    """Under the cost table, how sharded trials were scheduled."""
    widest, gpus = info.get("trial_gpus_max", 1), info["gpus"]
    if widest <= 1:
        return []
    if widest > gpus:
        return [
            f"  the widest trials span {widest} GPUs, more than --gpus {gpus}: they cannot "
            f"start there (the wall hours count them on {gpus})"
        ]
    return [f"  wall hours: a sharded trial holds its workers' GPUs (up to {widest}) until it ends"]


def _total(stages: list[cost.StageCost]) -> cost.StageCost:
    return cost.StageCost(
        "total",
        sum(s.trainings for s in stages),
        sum(s.flops for s in stages),
        sum(s.gpu_hours for s in stages),
        sum(s.wall_hours for s in stages),
        estimated=False,
    )


# --------------------------------------------------------------------------- the plan


def refine_info(spec: ExperimentSpec) -> dict | None:
    """``{design, summary, pairs}`` of the spec's refine stage (core/refine/design.py), or None
    where it has no refine pairs."""
    if not spec.refine.pairs:
        return None
    design = design_for(spec)
    return {"design": design.name, "summary": design.summary, "pairs": len(spec.refine.pairs)}


def refine_line(info: dict | None) -> str:
    """``dwtune plan``'s header line naming the refine design and why (:func:`refine_info`)."""
    if info is None:
        return "refine: none (no refine.pairs: the grid stage alone)"
    return f"refine design: {info['design']} ({info['summary']})"


@dataclass(frozen=True, repr=False)
class Plan:
    """Every grid cell of a spec and the checks around it; ``to_dict()`` is ``plan --json``."""

    spec: ExperimentSpec
    cells: list[dict]
    corpus: dict
    warnings: list[str]
    packing: dict | None = None  # None: no GPUs, or no known GPU memory
    cost: dict | None = None  # None: not asked for
    refusals: list[dict] = dataclasses.field(default_factory=list)  # why `run` would refuse

    @property
    def runnable(self) -> bool:
        """Whether `dwtune run` would start this study (else ``plan`` exits REFUSED_EXIT)."""
        return not self.refusals

    @property
    def trainings(self) -> int:
        return len(self.cells) * len(self.spec.space.seeds)

    @property
    def refine(self) -> dict | None:
        """The refine design the spec uses and what it buys or misses (``plan --json``'s
        ``refine``); None where the spec has no refine pairs."""
        return refine_info(self.spec)

    def to_dict(self) -> dict:
        return {
            "name": self.spec.name,
            "trainer": self.spec.trainer,
            "seeds": list(self.spec.space.seeds),
            "trainings": self.trainings,
            "cells": self.cells,
            "corpus": self.corpus,
            "warnings": self.warnings,
            "packing": self.packing,
            "cost": self.cost,
            "refine": self.refine,
            "runnable": self.runnable,
            "refusals": self.refusals,
        }

    def to_frame(self):
        """One row per grid cell (depth, budget, width, params, FLOPs/token, regime, ...)."""
        import pandas as pd

        return pd.DataFrame(self.cells)

    def __repr__(self) -> str:
        corpus = self.corpus
        data = (
            "corpus missing"
            if corpus["missing"]
            else f"{corpus['train_tokens']:.3g} corpus tokens, {corpus['epochs']:.3g} epochs/trial"
        )
        cost = f", {self.cost['total']['gpu_hours']:,.1f} GPU-hours" if self.cost else ""
        return (
            f"<Plan {self.spec.name!r}: {len(self.cells)} cells x {len(self.spec.space.seeds)} "
            f"seed(s) = {self.trainings} trainings, trainer {self.spec.trainer}; {data}"
            f"{cost}; {len(self.warnings)} warning(s), {len(self.refusals)} refusal(s)>"
        )


def make_plan(
    spec: ExperimentSpec,
    device: str | None = None,
    cost: bool = False,
    peak_flops: float | None = None,
    mfu: float | None = None,
    gpus: int = 1,
) -> Plan:
    """The plan of ``spec``; ``refusals`` lists why `dwtune run` would refuse it (a missing
    corpus, more than data.max_epochs epochs, a trial that fits its GPU at no micro-batch)."""
    from dwtune.core.projection import reference

    corpus = corpus_size(spec)
    return Plan(
        spec=spec,
        cells=plan_rows(spec, device),
        corpus=corpus_info(spec, corpus),
        warnings=scale.coverage_warnings(spec, reference(spec.fit.reference)),
        packing=packing_info(spec, device),
        cost=cost_info(spec, device, peak_flops, mfu, gpus) if cost else None,
        refusals=refusals(spec, corpus, device),
    )
