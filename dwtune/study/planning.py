"""The plan of a study before anything trains (``dwtune plan``, :func:`dwtune.plan`): every
grid cell, and what `dwtune run` checks and estimates beyond the grid: the corpus's size
against the training length, the reference transitions against the budgets, per-trial memory
and GPU packing, and (``cost``) the study's FLOPs, GPU-hours and wall time. Each part is a plain
mapping of numbers (the ``--json`` fields), rendered as text by the ``*_lines`` functions.
No torch, no Ray."""

from __future__ import annotations

import dataclasses
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from dwtune.core import cost, memory, scale, sharding
from dwtune.core.budget import BUDGET_TOLERANCE, GridCell, depth_threshold, flops_per_token
from dwtune.core.errors import InputError
from dwtune.core.spec import BUILTIN_CORPORA, DataConfig, ExperimentSpec

BENCH_RESULTS = Path(DataConfig().cache_dir).expanduser() / "bench" / "results.jsonl"


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
    if corpus.missing:
        raise InputError(corpus.source)
    scale.check_epochs(spec, corpus)
    return corpus


# --------------------------------------------------------------------------- grid cells


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


def plan_rows(spec: ExperimentSpec, device: str | None = None) -> list[dict]:
    """Every cell's row, with ``workers``: the processes (GPUs) one of its trials spans."""
    gpu_bytes = gpu_memory_bytes(spec, device)
    return [
        {**cell_row(cell), "workers": sharding.trial_workers(spec, cell.shape, gpu_bytes)}
        for cell in spec.grid()
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
    """Peak bytes of one process of a trial of ``cell`` (one worker's, when it is sharded)."""
    workers = sharding.trial_workers(spec, cell.shape, gpu_bytes)
    return sharding.worker_memory(spec, cell.shape, workers)


def gpu_memory_bytes(spec: ExperimentSpec, device: str | None) -> int | None:
    if spec.resources.gpu_memory_gb:
        return int(spec.resources.gpu_memory_gb * 2**30)
    return cost.device_memory(device) if device else None


def _largest(spec: ExperimentSpec, gpu_bytes: int | None) -> tuple[GridCell, int, str]:
    widest = max(spec.grid(), key=lambda c: cell_memory(spec, c, gpu_bytes))
    workers = sharding.trial_workers(spec, widest.shape, gpu_bytes)
    what = f"trial L{widest.depth} x w{widest.shape.width}"
    if workers > 1:
        what += f" (each of its {workers} workers)"
    return widest, cell_memory(spec, widest, gpu_bytes), what


def check_packing(spec: ExperimentSpec, device: str | None = None) -> None:
    """Refuse (before launch) a study one of whose trials exceeds its share of a GPU."""
    gpu_bytes = gpu_memory_bytes(spec, device)
    if spec.resources.gpu <= 0 or gpu_bytes is None:
        return
    _, need, what = _largest(spec, gpu_bytes)
    problem = memory.packing_problem(need, spec.resources.gpu, gpu_bytes, what)
    if problem:
        raise InputError(problem)


def packing_info(spec: ExperimentSpec, device: str | None) -> dict | None:
    """How many trials of the grid share a GPU, and which do not fit their share (``plan
    --json``'s ``packing``); None without GPUs or a known GPU memory."""
    gpu_bytes = gpu_memory_bytes(spec, device)
    if spec.resources.gpu <= 0 or gpu_bytes is None:
        return None
    cells = spec.grid()
    fits = [memory.trials_per_gpu(cell_memory(spec, c, gpu_bytes), gpu_bytes) for c in cells]
    share = round(1 / spec.resources.gpu) if spec.resources.gpu < 1 else 1
    widest, need, what = _largest(spec, gpu_bytes)
    packable = [f for f in fits if f > share]
    suggest = len(packable) == len(fits) and 1 / min(fits) in (0.5, 0.25, 0.125)
    share_bytes = gpu_bytes * (1 - memory.GPU_RESERVE_FRACTION) * min(spec.resources.gpu, 1)
    return {
        "gpu_memory_bytes": gpu_bytes,
        "activation_bytes": activation_bytes(spec),
        "largest_trial": {"depth": widest.depth, "width": widest.shape.width, "bytes": need},
        "trials_per_gpu_min": min(fits),
        "trials_per_gpu_max": max(fits),
        "resources_gpu": spec.resources.gpu,
        "packed_per_gpu": share,
        "suggested_resources_gpu": 1 / min(fits) if suggest else None,
        "cells": len(cells),
        "cells_too_big": sum(cell_memory(spec, c, gpu_bytes) > share_bytes for c in cells),
        "problem": memory.packing_problem(need, spec.resources.gpu, gpu_bytes, what),
    }


def packing_lines(info: dict | None) -> list[str]:
    if info is None:
        return []
    largest = info["largest_trial"]
    lines = [
        f"memory (bf16 activations, AdamW): the largest trial L{largest['depth']} x "
        f"w{largest['width']} needs {largest['bytes'] / 2**30:.1f} GiB; "
        f"on a {info['gpu_memory_bytes'] / 2**30:.0f} GiB GPU between "
        f"{info['trials_per_gpu_min']} and {info['trials_per_gpu_max']} trials of "
        f"this grid fit per GPU; resources.gpu = {info['resources_gpu']:g} packs "
        f"{info['packed_per_gpu']} per GPU"
    ]
    if info["suggested_resources_gpu"] is not None:
        lines.append(
            f"  set resources.gpu: {info['suggested_resources_gpu']:g} to pack "
            f"{info['trials_per_gpu_min']} per GPU"
        )
    if info["cells_too_big"]:
        lines.append(
            f"  DOES NOT FIT: {info['cells_too_big']} of {info['cells']} cells exceed their "
            f"share of one GPU; `dwtune run` refuses the study before launch: {info['problem']}"
        )
    return lines


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


def trial_flops(spec: ExperimentSpec, cell: GridCell) -> float:
    steps = spec.train.total_steps(spec.data.seq_len)
    per_eval = spec.train.eval_batches * spec.train.batch_size * spec.data.seq_len
    eval_tokens = (steps // spec.train.eval_every + 1) * per_eval
    return cost.trial_flops(cell.shape, scale.tokens_per_trial(spec), eval_tokens)


def study_cost(spec: ExperimentSpec, peak: float, mfu: float, gpus: int) -> list[cost.StageCost]:
    from dwtune.core.records import grid_requests
    from dwtune.study.estimate import refine_rounds

    per_gpu = round(1 / spec.resources.gpu) if 0 < spec.resources.gpu < 1 else 1
    grid = [[trial_flops(spec, r.cell) for r in grid_requests(spec)]]
    refine = [[trial_flops(spec, r.cell) for r in batch] for batch in refine_rounds(spec)]
    return [
        cost.stage_cost("grid", grid, peak, mfu, gpus, per_gpu),
        cost.stage_cost("refine", refine, peak, mfu, gpus, per_gpu, estimated=True),
    ]


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
    stages = study_cost(spec, peak, used, gpus)
    return {
        "peak_flops": peak,
        "peak_source": peak_note,
        "mfu": used,
        "mfu_source": mfu_note,
        "gpus": gpus,
        "stages": [dataclasses.asdict(s) for s in stages],
        "total": dataclasses.asdict(_total(stages)),
    }


def cost_lines(info: dict | None) -> list[str]:
    if not info:
        return []
    lines = [
        f"cost at {info['peak_flops'] / 1e12:.0f} TFLOP/s ({info['peak_source']}) x MFU "
        f"{info['mfu']:.0%} ({info['mfu_source']}), on {info['gpus']} GPU(s):",
        f"{'stage':<8} {'trainings':>9} {'FLOPs':>10} {'GPU-hours':>11} {'wall hours':>11}",
    ]
    for s in [*info["stages"], info["total"]]:
        note = "  (estimated: simulated refine decision)" if s["estimated"] else ""
        lines.append(
            f"{s['stage']:<8} {s['trainings']:>9,} {s['flops']:>10.3g} {s['gpu_hours']:>11,.1f} "
            f"{s['wall_hours']:>11,.1f}{note}"
        )
    return lines


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


@dataclass(frozen=True, repr=False)
class Plan:
    """Every grid cell of a spec and the checks around it; ``to_dict()`` is ``plan --json``."""

    spec: ExperimentSpec
    cells: list[dict]
    corpus: dict
    warnings: list[str]
    packing: dict | None = None  # None: no GPUs, or no known GPU memory
    cost: dict | None = None  # None: not asked for

    @property
    def trainings(self) -> int:
        return len(self.cells) * len(self.spec.space.seeds)

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
            f"{cost}; {len(self.warnings)} warning(s)>"
        )


def make_plan(
    spec: ExperimentSpec,
    device: str | None = None,
    cost: bool = False,
    peak_flops: float | None = None,
    mfu: float | None = None,
    gpus: int = 1,
) -> Plan:
    """The plan of ``spec``; raises InputError for a torch study that would read its corpus
    more than data.max_epochs times."""
    from dwtune.core.projection import reference

    corpus = corpus_size(spec)
    problem = scale.epoch_problem(spec, corpus) if spec.trainer == "torch" else None
    if problem:
        raise InputError(problem)
    return Plan(
        spec=spec,
        cells=plan_rows(spec, device),
        corpus=corpus_info(spec, corpus),
        warnings=scale.coverage_warnings(spec, reference(spec.fit.reference)),
        packing=packing_info(spec, device),
        cost=cost_info(spec, device, peak_flops, mfu, gpus) if cost else None,
    )
