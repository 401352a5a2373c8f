"""What `dwtune plan` and `dwtune run` check and estimate beyond the grid: the corpus's size
against the training length, the reference transitions against the budgets, per-trial memory
and GPU packing, and (``--cost``) the study's FLOPs, GPU-hours and wall time. No torch."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from dwtune.core import cost, memory, scale
from dwtune.core.budget import GridCell
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


def corpus_lines(spec: ExperimentSpec, corpus: scale.CorpusSize) -> list[str]:
    if corpus.missing:
        return [f"corpus MISSING: {corpus.source}", "(the plan and cost below do not need it)"]
    seen = scale.epochs(spec, corpus)
    return [
        f"corpus {spec.data.corpus}: {corpus.train_tokens:.3g} training tokens "
        f"({corpus.source}); each trial trains on {scale.tokens_per_trial(spec):.3g} tokens "
        f"= {seen:.3g} epochs (data.max_epochs {spec.data.max_epochs:g})"
    ]


# --------------------------------------------------------------------------- memory, packing


def activation_bytes(spec: ExperimentSpec) -> int:
    """2 under bf16 autocast on a GPU, 4 in fp32 on CPU."""
    return 2 if spec.resources.gpu > 0 else 4


def cell_memory(spec: ExperimentSpec, cell: GridCell) -> int:
    return memory.trial_memory(cell.shape, spec.train.batch_size, activation_bytes(spec)).total


def gpu_memory_bytes(spec: ExperimentSpec, device: str | None) -> int | None:
    if spec.resources.gpu_memory_gb:
        return int(spec.resources.gpu_memory_gb * 2**30)
    return cost.device_memory(device) if device else None


def _largest(spec: ExperimentSpec) -> tuple[GridCell, int, str]:
    widest = max(spec.grid(), key=lambda c: cell_memory(spec, c))
    return widest, cell_memory(spec, widest), f"trial L{widest.depth} x w{widest.shape.width}"


def check_packing(spec: ExperimentSpec, device: str | None = None) -> None:
    """Refuse (before launch) a study one of whose trials exceeds its share of a GPU."""
    gpu_bytes = gpu_memory_bytes(spec, device)
    if spec.resources.gpu <= 0 or gpu_bytes is None:
        return
    _, need, what = _largest(spec)
    problem = memory.packing_problem(need, spec.resources.gpu, gpu_bytes, what)
    if problem:
        raise InputError(problem)


def packing_lines(spec: ExperimentSpec, device: str | None) -> list[str]:
    """How many trials of the grid share a GPU, and which do not fit their share."""
    gpu_bytes = gpu_memory_bytes(spec, device)
    if spec.resources.gpu <= 0 or gpu_bytes is None:
        return []
    cells = spec.grid()
    fits = [memory.trials_per_gpu(cell_memory(spec, c), gpu_bytes) for c in cells]
    share = round(1 / spec.resources.gpu) if spec.resources.gpu < 1 else 1
    _, need, what = _largest(spec)
    lines = [
        f"memory (bf16 activations, AdamW): the largest {what} needs {need / 2**30:.1f} GiB; "
        f"on a {gpu_bytes / 2**30:.0f} GiB GPU between {min(fits)} and {max(fits)} trials of "
        f"this grid fit per GPU; resources.gpu = {spec.resources.gpu:g} packs {share} per GPU"
    ]
    packable = [f for f in fits if f > share]
    if len(packable) == len(fits) and 1 / min(fits) in (0.5, 0.25, 0.125):
        lines.append(f"  set resources.gpu: {1 / min(fits):g} to pack {min(fits)} per GPU")
    share_bytes = gpu_bytes * (1 - memory.GPU_RESERVE_FRACTION) * min(spec.resources.gpu, 1)
    too_big = sum(cell_memory(spec, c) > share_bytes for c in cells)
    if too_big:
        lines.append(
            f"  DOES NOT FIT: {too_big} of {len(cells)} cells exceed their share of one GPU; "
            f"`dwtune run` refuses the study before launch: "
            f"{memory.packing_problem(need, spec.resources.gpu, gpu_bytes, what)}"
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


def cost_lines(args, spec: ExperimentSpec) -> list[str]:
    if args.gpus < 1:
        raise InputError(f"--gpus: got {args.gpus}; expected an integer >= 1")
    device = args.device or ("h100" if args.peak_flops is None else None)
    peak = args.peak_flops or cost.device_peak(device)
    peak_note = f"--peak-flops {peak:.3g}" if args.peak_flops else f"{device} bf16 dense peak"
    measured = None if args.mfu else bench_mfu(device)
    mfu, mfu_note = (
        (args.mfu, "--mfu")
        if args.mfu
        else measured or (cost.ASSUMED_MFU, "ASSUMED (no dwtune bench result on this device)")
    )
    if not 0 < mfu <= 1:
        raise InputError(f"--mfu: got {mfu}; expected 0 < MFU <= 1")
    stages = study_cost(spec, peak, mfu, args.gpus)
    lines = [
        f"cost at {peak / 1e12:.0f} TFLOP/s ({peak_note}) x MFU {mfu:.0%} ({mfu_note}), "
        f"on {args.gpus} GPU(s):",
        f"{'stage':<8} {'trainings':>9} {'FLOPs':>10} {'GPU-hours':>11} {'wall hours':>11}",
    ]
    for s in [*stages, _total(stages)]:
        note = "  (estimated: simulated refine decision)" if s.estimated else ""
        lines.append(
            f"{s.stage:<8} {s.trainings:>9,} {s.flops:>10.3g} {s.gpu_hours:>11,.1f} "
            f"{s.wall_hours:>11,.1f}{note}"
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
