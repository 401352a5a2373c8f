"""A ten-minute GPU go/no-go: six checks of the GPU path, one JSON summary, non-zero on failure.

    bash benchmarks/gpu_check.sh [SUMMARY.json]     # default gpu_check.json; <= 9 min on one GPU
    python benchmarks/gpu_check.py --device cpu     # the same checks' logic on CPU (dev mode)

Checks (most in this one process: cold starts and compiles are the cost):

- ``mfu_w1024``, ``mfu_w2048``: `dwtune bench`'s compiled bf16 step (the trainer's step on random
  tokens) at depth 12 x width 1024 and 2048, 2 heads, seq 128, vocab 2000, the largest batch
  (a power of two <= 512) the plan runs in one pass; MFU >= 40% (the published 1B-class figure);
- ``memory_w1024``, ``memory_w2048``: that run's peak ``torch.cuda.max_memory_allocated``
  against the plan's figure for the same cell (``dwtune.core.sharding.trial_layout``, on the
  memory the device reports), within 10%;
- ``micro_batch``: a trial trained as micro-batches (gradient accumulation) against the same
  trial trained whole (same seed, bundled corpus): losses within 1e-3;
- ``fsdp``: ``train_sharded`` over NCCL (world size 1 on one GPU, 2 processes where 2+ GPUs
  are lent) against the plain trainer: losses within 2e-2 relative under bf16 (FSDP2 rounds
  differently from autocast), 1e-4 in fp32;
- ``dcp_resume``: a process trains the sharded trial with checkpoints, is SIGKILLed after its
  checkpoint at step k, a new process resumes from it: it continues after step k and ends at
  the uninterrupted run's loss within 1e-3; the checkpoint must be a DCP one (a ``.metadata``);
- ``tune_trial``: `dwtune run --grid-only` of a one-trial spec with ``resources.gpu: 1`` (a
  local Ray, a real Tune trial): finished, finite loss, GPU-seconds > 0 (it trained on CUDA).

Each check has a deadline (its own cap, within an overall budget of 510 s); a check that runs
out of time, or is not reached, is a failure with the reason. The summary (stdout and the
file) holds the device, its reported memory and per check {name, ok, value, target, seconds,
detail}. Exit 0: every check passed; 1: one failed; 2: no CUDA device (one line on stderr).

``--device cpu`` is a dev mode: tiny shapes, fp32, no compile, gloo for NCCL; the MFU and
memory checks run but are not judged (ok null), the others are judged as on a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

NO_CUDA_EXIT = 2
NO_CUDA_LINE = (
    "gpu_check: no CUDA device here (no GPU driver, or torch.cuda.is_available() is False): run "
    "it on a machine with an NVIDIA GPU and a CUDA build of torch; `python "
    "benchmarks/gpu_check.py --device cpu` checks its logic on CPU"
)
GROUPS = ("mfu", "micro", "fsdp", "resume", "tune")
BUDGET_S = 510.0  # 8.5 minutes; gpu_check.sh kills at 540 s
MIN_START_S = 10.0  # a check is not started with less time left
CAPS_S = {"mfu": 210.0, "micro": 45.0, "fsdp": 60.0, "resume": 95.0, "tune": 100.0}
MFU_TARGET = 0.40
MEMORY_RTOL = 0.10
MICRO_ATOL = 1e-3
RESUME_ATOL = 1e-3
FSDP_RTOL = {"cuda": 2e-2, "cpu": 1e-4}  # as benchmarks/twin_check.py
KILLED_MARK = "GPU_CHECK_CHECKPOINTED"


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The shapes of one mode: the GPU's, or tiny ones for the CPU dev mode."""

    mfu_depth: int = 12
    mfu_widths: tuple[int, ...] = (1024, 2048)
    mfu_vocab: int = 2000
    mfu_seq: int = 128
    mfu_max_batch: int = 512
    mfu_steps: int = 10
    mfu_warmup: int = 3
    depth: int = 4  # the trainer checks (micro, fsdp, resume, tune): bundled char corpus
    width: int = 256
    seq: int = 128
    vocab: int = 128
    batch: int = 32
    micro: int = 8
    # few steps: bf16 rounds a micro-batch's matmuls differently, and Adam carries that on
    steps: int = 10
    eval_every: int = 5  # the resume check is killed after the first checkpoint


QUICK = Sizes(
    mfu_depth=2,
    mfu_widths=(64,),
    mfu_vocab=96,
    mfu_seq=32,
    mfu_max_batch=8,
    mfu_steps=2,
    mfu_warmup=1,
    depth=2,
    width=64,
    seq=32,
    vocab=96,
    batch=8,
    micro=2,
    steps=8,
    eval_every=4,
)


@dataclasses.dataclass
class Check:
    name: str
    ok: bool | None
    value: object = None
    target: str = ""
    seconds: float = 0.0
    detail: str = ""


class CheckTimeout(Exception):
    pass


# --------------------------------------------------------------------------- the run


class Run:
    """One go/no-go: the mode, the scratch folder, the checks done so far and the deadlines."""

    def __init__(self, args: argparse.Namespace, scratch: Path):
        self.args, self.scratch = args, scratch
        self.device = args.device
        self.cuda = args.device == "cuda"
        self.sizes = QUICK if args.quick or not self.cuda else Sizes()
        self.start = time.monotonic()
        self.end = self.start + args.budget_s
        self.checks: list[Check] = []
        self.partial: list[Check] = []  # a group's checks done before it failed
        self.stage = ""  # what the running check is doing (for a timeout's detail)
        self.lock = threading.RLock()
        self.emitted = False
        self.children: list[subprocess.Popen] = []
        self.cache_dir = str(scratch / "cache")
        self.info: dict = {}
        self._plain_reference: list[dict] | None = None
        self._sharded_reference: list[dict] | None = None

    def left(self) -> float:
        return self.end - time.monotonic()

    def add(self, check: Check) -> None:
        with self.lock:
            self.checks.append(check)
        mark = {True: "ok", False: "FAIL", None: "not judged"}[check.ok]
        say(
            f"{check.name}: {mark} value={check.value} target={check.target} "
            f"({check.seconds:.1f} s) {check.detail}"
        )

    def spawn(self, command: list[str], **kwargs) -> subprocess.Popen:
        """A child in its own session (its whole group is killed on a deadline)."""
        proc = subprocess.Popen(command, start_new_session=True, **kwargs)
        self.children.append(proc)
        return proc

    def kill_children(self) -> None:
        for proc in self.children:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)


def say(text: str) -> None:
    print(f"gpu_check: {text}", file=sys.stderr, flush=True)


def device_info(cuda: bool) -> dict:
    import torch

    info = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if not cuda:
        return info | {
            "device_name": f"CPU ({os.cpu_count()} cores)",
            "device_count": 0,
            "memory_bytes": None,
            "memory_gib": None,
        }
    props = torch.cuda.get_device_properties(0)
    return info | {
        "device_name": torch.cuda.get_device_name(0),
        "device_count": torch.cuda.device_count(),
        "memory_bytes": int(props.total_memory),  # what the device reports
        "memory_gib": round(props.total_memory / 2**30, 2),
    }


def summary(run: Run, info: dict) -> dict:
    with run.lock:
        checks = [dataclasses.asdict(c) for c in run.checks]
    failed = [c["name"] for c in checks if c["ok"] is False]
    return {
        "ok": not failed and bool(checks),
        "mode": "gpu" if run.cuda else "cpu-dev",
        "quick": run.sizes == QUICK,
        "device": run.device,
        **info,
        "budget_s": run.args.budget_s,
        "wall_s": round(time.monotonic() - run.start, 1),
        "failed": failed,
        "checks": checks,
    }


def emit(run: Run, info: dict, stdout_fd: int) -> int:
    """Write the summary to the file and to the real stdout, once (the main thread or the
    watchdog, whichever comes first); the exit code."""
    with run.lock:
        if run.emitted:
            return 1
        run.emitted = True
        result = summary(run, info)
        text = json.dumps(result, indent=2, default=_jsonable) + "\n"
        Path(run.args.output).write_text(text)
        os.write(stdout_fd, text.encode())
    return 0 if result["ok"] else 1


def _jsonable(value: object) -> object:
    return str(value)


def finite(value: float | None) -> float | None:
    """JSON has no NaN/inf: None instead."""
    return value if value is not None and math.isfinite(value) else None


# --------------------------------------------------------------------------- deadlines


@contextlib.contextmanager
def alarm(seconds: float):
    """Raise CheckTimeout in this (main) thread after ``seconds``."""

    def fire(_signum, _frame):
        raise CheckTimeout(f"ran past its {seconds:.0f} s deadline")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def watchdog(run: Run, info: dict, stdout_fd: int) -> None:
    """Past the overall budget (+15 s grace for a check to notice its own deadline): report what
    is done, the rest as failures, and exit 1, whatever the main thread is stuck in."""
    time.sleep(max(0.0, run.left() + 15.0))
    run.kill_children()
    with run.lock:
        run.checks += [c for c in run.partial if c not in run.checks]
        done = {c.name for c in run.checks}
        for group in selected(run.args):
            if not any(name.startswith(PREFIX[group]) for name in done):
                why = f"not finished: the overall {run.args.budget_s:.0f} s budget ran out"
                run.checks.append(Check(PREFIX[group], False, detail=why))
    emit(run, info, stdout_fd)
    os._exit(1)


PREFIX = {
    "mfu": "mfu",
    "micro": "micro_batch",
    "fsdp": "fsdp",
    "resume": "dcp_resume",
    "tune": "tune_trial",
}


def selected(args: argparse.Namespace) -> list[str]:
    return [g for g in GROUPS if g in args.only]


def run_group(run: Run, group: str, body: Callable[[Run, float], list[Check]]) -> None:
    """One group of checks under its deadline; any error or timeout is a failed check."""
    cap = min(CAPS_S[group] * run.args.cap_scale, run.left())
    started = time.monotonic()
    run.partial, run.stage = [], ""
    if cap < MIN_START_S:
        run.add(
            Check(
                PREFIX[group],
                False,
                detail=f"not run: {run.left():.0f} s of the {run.args.budget_s:.0f} s budget left",
            )
        )
        return
    try:
        with alarm(cap):
            if group == run.args.inject_failure:
                raise RuntimeError("injected failure (--inject-failure)")
            checks = body(run, started + cap)
    except Exception as exc:  # a failure (a CheckTimeout too) is a result
        run.kill_children()
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else ""
        where = f" (while {run.stage})" if run.stage else ""
        failure = Check(PREFIX[group], False, detail=f"{type(exc).__name__}: {reason}{where}"[:400])
        checks = [*run.partial, failure]
    for check in checks:
        if not check.seconds:
            check.seconds = round(time.monotonic() - started, 1)
        run.add(check)


# --------------------------------------------------------------------------- specs


def trainer_spec(run: Run, name: str = "gpu_check", **train):
    """The trainer checks' spec: the bundled char corpus, the mode's tiny-or-small shape."""
    from dwtune.core.spec import spec_from_dict

    return spec_from_dict(trainer_raw(run, name, **train))


def trainer_raw(run: Run, name: str, resources: dict | None = None, **train) -> dict:
    s = run.sizes
    return {
        "name": name,
        "trainer": "torch",
        "data": {
            "corpus": "shakespeare",
            "tokenizer": "char",
            "vocab_size": s.vocab,
            "seq_len": s.seq,
            "cache_dir": run.cache_dir,
        },
        "model": {"heads": 2, "width_multiple": 2},
        "space": {"depths": [s.depth], "budgets": [12 * s.depth * s.width**2], "seeds": 1},
        "train": {
            "steps": s.steps,
            "batch_size": s.batch,
            "lr": 3e-3,
            "warmup_steps": max(1, s.steps // 5),
            "eval_every": s.eval_every,
            "eval_batches": 2,
            "device": run.device,
            "compile": "false",  # the compiled step is the MFU check's; here: the logic
            **train,
        },
        "resources": resources or {"cpu": 1},
    }


def trainer_shape(run: Run):
    from dwtune.core.budget import ModelShape

    s = run.sizes
    return ModelShape(s.depth, s.width, 2, s.vocab, s.seq)


def curve(reports: list[dict]) -> list[tuple[int, float, float]]:
    """(step, train loss, val loss) at every report."""
    from dwtune.core import vocabulary as v

    return [(r[v.STEP], r[v.TRAIN_LOSS], r[v.VAL_LOSS]) for r in reports]


def largest_difference(got: list[dict], want: list[dict], relative: bool) -> float:
    """Largest (absolute or relative) difference of two loss curves; inf if steps differ."""
    a, b = curve(got), curve(want)
    if [x[0] for x in a] != [x[0] for x in b] or not a:
        return math.inf
    return max(
        abs(x - y) / (max(abs(y), 1e-12) if relative else 1.0)
        for ga, wa in zip(a, b, strict=True)
        for x, y in zip(ga[1:], wa[1:], strict=True)
    )


# --------------------------------------------------------------------------- 1, 2: MFU, memory


def plan_cell(run: Run, width: int, batch: int):
    """The plan's layout of the MFU cell at ``batch`` on this device (None on CPU: no limit)."""
    from dwtune.core.budget import ModelShape
    from dwtune.core.sharding import trial_layout
    from dwtune.core.spec import spec_from_dict

    s = run.sizes
    shape = ModelShape(s.mfu_depth, width, 2, s.mfu_vocab, s.mfu_seq)
    spec = spec_from_dict(
        {
            "name": "gpu_check_mfu",
            "space": {"depths": [s.mfu_depth], "budgets": [12 * s.mfu_depth * width**2]},
            "data": {"seq_len": s.mfu_seq, "vocab_size": s.mfu_vocab, "cache_dir": run.cache_dir},
            "model": {"heads": 2},
            "train": {"batch_size": batch, "device": run.device, "steps": 10},
            "resources": {"gpu": 1 if run.cuda else 0},
        }
    )
    memory = run.info.get("memory_bytes")
    return trial_layout(spec, shape, memory)


def mfu_batch(run: Run, width: int) -> tuple[int, object]:
    """The largest power-of-two batch the plan runs in one pass (no micro-batches, no
    activation checkpointing), so that `bench`'s whole-batch step is the planned one."""
    batch = run.sizes.mfu_max_batch
    while batch > 1:
        layout = plan_cell(run, width, batch)
        split = layout.split
        if (
            layout.workers == 1
            and layout.fits
            and split.accumulation == 1
            and not split.checkpointing
        ):
            return batch, layout
        batch //= 2
    return 1, plan_cell(run, width, 1)


def bench_args(run: Run, width: int, batch: int) -> argparse.Namespace:
    """`dwtune bench --json`'s arguments, parsed by its own parser (its defaults follow it)."""
    from dwtune.commands import bench

    s = run.sizes
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(
        [
            "--depth",
            str(s.mfu_depth),
            "--width",
            str(width),
            "--heads",
            "2",
            "--seq-len",
            str(s.mfu_seq),
            "--vocab-size",
            str(s.mfu_vocab),
            "--batch-size",
            str(batch),
            "--steps",
            str(s.mfu_steps),
            "--warmup",
            str(s.mfu_warmup),
            "--device",
            run.device,
            "--compile" if run.cuda else "--no-compile",
            "--results",
            "none",
            "--json",
        ]
    )


def release_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch._dynamo.reset()  # a new shape compiles afresh, not as a dynamic-shape graph
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def measure_width(run: Run, width: int) -> tuple[dict, int, object, list[int]]:
    """`dwtune bench`'s measurement at the planned batch; out of memory: half the batch."""
    from dwtune.commands.bench import measure
    from dwtune.core.errors import InputError

    batch, layout = mfu_batch(run, width)
    tried = []
    while True:
        tried.append(batch)
        run.stage = f"measuring width {width} at batch {batch}"
        release_memory()
        try:
            return measure(bench_args(run, width, batch)), batch, layout, tried
        except InputError as exc:
            if "out of memory" not in str(exc) or batch <= 1:
                raise
            batch //= 2
            layout = plan_cell(run, width, batch)


def check_mfu(run: Run, _deadline: float) -> list[Check]:
    checks = run.partial  # a width measured before a timeout is still reported
    for width in run.sizes.mfu_widths:
        started = time.monotonic()
        try:
            result, batch, layout, tried = measure_width(run, width)
        except CheckTimeout:
            raise
        except Exception as exc:  # one width's failure is that width's result
            detail = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1:]}"
            seconds = round(time.monotonic() - started, 1)
            checks += [
                Check(f"mfu_w{width}", False, None, f">= {MFU_TARGET}", seconds, detail),
                Check(
                    f"memory_w{width}",
                    False,
                    None,
                    f"|rel| <= {MEMORY_RTOL}",
                    seconds,
                    "no measurement: " + detail,
                ),
            ]
            continue
        seconds = round(time.monotonic() - started, 1)
        checks += [
            mfu_check(run, width, result, tried, seconds),
            memory_check(run, width, result, layout, batch, seconds),
        ]
        release_memory()
    return checks


def mfu_check(run: Run, width: int, r: dict, tried: list[int], seconds: float) -> Check:
    mfu = r["mfu"]
    compile_s = r.get("compile_time_s")
    detail = (
        f"depth {r['depth']} x width {width}, batch {r['batch_size']} (tried {tried}), "
        f"{r['precision']}, compile {r['compile']}"
        + (f" ({compile_s:.1f} s)" if compile_s is not None else "")
        + f", {r['tokens_per_s']:,.0f} tokens/s, step {1e3 * r['step_time_s']:.1f} ms, "
        f"attention {r['attention_backend']}, peak {r['peak_source']}"
    )
    ok = mfu >= MFU_TARGET if run.cuda else None
    if not run.cuda:
        detail = "not judged on cpu (dev mode); " + detail
    return Check(f"mfu_w{width}", ok, round(mfu, 4), f">= {MFU_TARGET}", seconds, detail)


def memory_check(run: Run, width: int, r: dict, layout, batch: int, seconds: float) -> Check:
    measured, planned = r["peak_memory_bytes"], layout.worker_bytes
    relative = measured / planned - 1
    detail = (
        f"{r['peak_memory_kind']} {measured / 2**30:.2f} GiB vs plan {planned / 2**30:.2f} GiB "
        f"(trial_layout at batch {batch}: {layout.split.label()}, device memory "
        f"{run.info.get('memory_gib')} GiB)"
    )
    ok = abs(relative) <= MEMORY_RTOL if run.cuda else None
    if not run.cuda:
        detail = "not judged on cpu (dev mode); " + detail
    return Check(
        f"memory_w{width}", ok, round(relative, 4), f"|rel| <= {MEMORY_RTOL}", seconds, detail
    )


# --------------------------------------------------------------------------- 3: micro-batches


def train_plain(run: Run, spec) -> list[dict]:
    from dwtune.backends.pytorch.train import train_model

    reports: list[dict] = []
    train_model(spec, trainer_shape(run), 0, lambda metrics, _dir: reports.append(metrics))
    return reports


def plain_reference(run: Run) -> list[dict]:
    """The plain (whole-batch, one-process) trial: the micro and fsdp checks' reference."""
    if run._plain_reference is None:
        run.stage = "training the plain reference"
        run._plain_reference = train_plain(run, trainer_spec(run))
    return run._plain_reference


def check_micro(run: Run, _deadline: float) -> list[Check]:
    whole = plain_reference(run)
    run.stage = "training in micro-batches"
    split = train_plain(run, trainer_spec(run, micro_batch_size=run.sizes.micro))
    difference = largest_difference(split, whole, relative=False)
    s = run.sizes
    return [
        Check(
            "micro_batch",
            difference <= MICRO_ATOL,
            finite(difference),
            f"<= {MICRO_ATOL}",
            detail=f"max |loss difference| over train and val loss at steps "
            f"{[c[0] for c in curve(whole)]}: batch {s.batch} whole vs {s.batch // s.micro} "
            f"micro-batches of {s.micro}; final val {curve(whole)[-1][2]:.4f} vs "
            f"{curve(split)[-1][2]:.4f}",
        )
    ]


# --------------------------------------------------------------------------- 4: FSDP2


def sharded_in_process(run: Run, spec, **kwargs) -> list[dict]:
    """train_sharded as rank 0 of a world of 1 in this process (NCCL on CUDA, gloo on CPU)."""
    import torch
    import torch.distributed as dist

    from dwtune.backends.pytorch.sharded import train_sharded

    if run.cuda:
        torch.cuda.set_device(0)
    store = tempfile.mkdtemp(dir=run.scratch, prefix="store-")
    backend = "nccl" if run.cuda else "gloo"
    dist.init_process_group(backend, init_method=f"file://{store}/pg", rank=0, world_size=1)
    reports: list[dict] = []
    try:
        train_sharded(spec, trainer_shape(run), 0, lambda m, _d: reports.append(m), **kwargs)
    finally:
        dist.destroy_process_group()
    return reports


def sharded_reference(run: Run) -> list[dict]:
    """An uninterrupted sharded run of world size 1 (the resume check's reference)."""
    if run._sharded_reference is None:
        run.stage = "training the sharded reference in this process"
        run._sharded_reference = sharded_in_process(run, trainer_spec(run))
    return run._sharded_reference


def fsdp_world(run: Run) -> int:
    if run.args.fsdp_world:
        return run.args.fsdp_world
    return 2 if run.cuda and run.info.get("device_count", 0) >= 2 else 1


def check_fsdp(run: Run, deadline: float) -> list[Check]:
    world = fsdp_world(run)
    plain = plain_reference(run)
    sharded = sharded_reference(run) if world == 1 else sharded_children(run, world, deadline)
    rtol = FSDP_RTOL[run.device]
    difference = largest_difference(sharded, plain, relative=True)
    backend = "nccl" if run.cuda else "gloo"
    return [
        Check(
            "fsdp",
            difference <= rtol,
            finite(difference),
            f"<= {rtol} relative",
            detail=f"train_sharded over {backend}, world size {world}, against the plain trainer: "
            f"max relative difference of train and val loss; final val {curve(plain)[-1][2]:.4f} "
            f"vs {curve(sharded)[-1][2]:.4f}",
        )
    ]


def child_command(run: Run, config: dict) -> list[str]:
    path = Path(tempfile.mkstemp(dir=run.scratch, prefix="child-", suffix=".json")[1])
    path.write_text(json.dumps(config))
    return [sys.executable, str(Path(__file__).resolve()), "--child", str(path)]


def child_env(run: Run) -> dict:
    env = dict(os.environ)
    if not run.cuda:
        env.setdefault("DWTUNE_THREADS", "1")
    return env


def child_config(run: Run, role: str, **extra) -> dict:
    return {
        "role": role,
        "raw": trainer_raw(run, "gpu_check"),
        "shape": dataclasses.asdict(trainer_shape(run)),
        "cuda": run.cuda,
        **extra,
    }


def sharded_children(run: Run, world: int, deadline: float) -> list[dict]:
    """A world of ``world`` processes (one GPU each) training the sharded trial."""
    store = tempfile.mkdtemp(dir=run.scratch, prefix="store-")
    out = run.scratch / "sharded-rank0.json"
    run.stage = f"waiting for the {world} ranks of the sharded job"
    procs = [
        run.spawn(
            child_command(
                run,
                child_config(
                    run, "sharded", rank=rank, world=world, init=f"file://{store}/pg", out=str(out)
                ),
            ),
            env=child_env(run),
        )
        for rank in range(world)
    ]
    for proc in procs:
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        if code != 0:
            raise RuntimeError(f"a rank of the sharded job exited {code}")
    return json.loads(out.read_text())["reports"]


# --------------------------------------------------------------------------- 5: kill, resume


def check_resume(run: Run, deadline: float) -> list[Check]:
    reference = sharded_reference(run)
    ckpt = run.scratch / "resume-ckpt"
    ckpt.mkdir()
    kill_at = run.sizes.eval_every
    run.stage = f"waiting for the training process's checkpoint at step {kill_at}"
    killed_at, killed_code = train_then_kill(run, ckpt, kill_at, deadline)
    files = sorted(str(p.relative_to(ckpt)) for p in ckpt.rglob("*") if p.is_file())
    dcp = any(Path(f).name == ".metadata" for f in files)
    out = run.scratch / "resumed.json"
    run.stage = f"waiting for the process resuming from step {killed_at}"
    proc = run.spawn(
        child_command(run, child_config(run, "resume", ckpt=str(ckpt), out=str(out))),
        env=child_env(run),
    )
    code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    if code != 0:
        raise RuntimeError(f"the resuming process exited {code}")
    resumed = json.loads(out.read_text())["reports"]
    first_step = curve(resumed)[0][0] if resumed else None
    got, want = curve(resumed)[-1][2], curve(reference)[-1][2]
    difference = abs(got - want)
    continued = first_step is not None and first_step > killed_at
    ok = difference <= RESUME_ATOL and continued and dcp and killed_code == -signal.SIGKILL
    detail = (
        f"killed (exit {killed_code}) after its checkpoint at step {killed_at}; the new "
        f"process reported from step {first_step}; final val {got:.5f} vs uninterrupted "
        f"{want:.5f}; checkpoint {'DCP' if dcp else 'NOT DCP'}: {files[:6]}"
        + (f" (+{len(files) - 6} more)" if len(files) > 6 else "")
    )
    return [Check("dcp_resume", ok, finite(difference), f"<= {RESUME_ATOL}", detail=detail)]


def train_then_kill(run: Run, ckpt: Path, kill_at: int, deadline: float) -> tuple[int, int]:
    """A process trains with checkpoints to ``ckpt``; SIGKILL once it announces the checkpoint
    at ``kill_at`` (it waits there). Returns (the step it said, its exit code)."""
    proc = run.spawn(
        child_command(run, child_config(run, "kill", ckpt=str(ckpt), kill_at=kill_at)),
        env=child_env(run),
        stdout=subprocess.PIPE,
        text=True,
    )
    step = None
    assert proc.stdout is not None
    for line in proc.stdout:  # the alarm interrupts a stuck read
        if line.startswith(KILLED_MARK):
            step = int(line.split()[1])
            break
    if step is None:
        raise RuntimeError(f"the training process exited {proc.wait()} before its checkpoint")
    os.killpg(proc.pid, signal.SIGKILL)
    code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    return step, code


# --------------------------------------------------------------------------- 6: a Tune trial


def check_tune(run: Run, deadline: float) -> list[Check]:
    """`dwtune run --grid-only` of a one-trial spec that asks for a GPU (on CPU: none)."""
    spec = run.scratch / "tune.yaml"
    resources = {"cpu": 1, "gpu": 1 if run.cuda else 0}
    spec.write_text(json.dumps(trainer_raw(run, "gpu_check_tune", resources)))  # YAML ⊃ JSON
    storage = run.scratch / "experiments"
    env = {k: v for k, v in child_env(run).items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    command = [
        sys.executable,
        "-m",
        "dwtune",
        "run",
        str(spec),
        "--storage",
        str(storage),
        "--grid-only",
        "--json",
    ]
    run.stage = "waiting for `dwtune run` (Ray start, the trial, the export)"
    proc = run.spawn(command, env=env, stdout=subprocess.PIPE, text=True)
    try:
        out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic() - 15))
    except subprocess.TimeoutExpired:
        stop_gently(proc)
        raise RuntimeError("dwtune run did not finish before the check's deadline") from None
    if proc.returncode != 0:
        raise RuntimeError(f"dwtune run exited {proc.returncode} (its stderr is above)")
    starts = [m.start() for m in re.finditer(r"^\{$", out, re.M)]  # `run --json`: indent 2
    if not starts:
        raise RuntimeError(f"dwtune run printed no JSON answer: {out[-300:]!r}")
    answer = json.loads(out[starts[-1] :])
    records = [
        json.loads(p.read_text())
        for p in sorted((Path(answer["experiment"]) / "trials").glob("*.json"))
    ]
    if len(records) != 1:
        raise RuntimeError(f"expected one trial record, found {len(records)}")
    r = records[0]
    loss = r.get("final_val_loss")
    saw_gpu = r.get("gpu_seconds", 0) > 0
    ok = (
        r.get("status") == "finished"
        and loss is not None
        and math.isfinite(loss)
        and (saw_gpu or not run.cuda)
    )
    return [
        Check(
            "tune_trial",
            ok,
            finite(loss),
            "finished, finite, on CUDA" if run.cuda else "finished, finite",
            detail=f"one Ray Tune trial (resources {resources}): status "
            f"{r.get('status')}, {r.get('steps')} steps, gpu_seconds {r.get('gpu_seconds')}, "
            f"mfu {r.get('mfu')}, node {r.get('node')}, error {r.get('error')!r}",
        )
    ]


def stop_gently(proc: subprocess.Popen) -> None:
    """Ctrl-C (dwtune run stops its Ray), then SIGKILL the group after 10 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


# --------------------------------------------------------------------------- children


def child_main(path: str) -> int:
    """A child process: one rank of a sharded job, or the killed or resuming process."""
    import torch
    import torch.distributed as dist

    from dwtune.backends.pytorch.sharded import train_sharded
    from dwtune.core import vocabulary
    from dwtune.core.budget import ModelShape
    from dwtune.core.spec import spec_from_dict

    config = json.loads(Path(path).read_text())
    spec, shape = spec_from_dict(config["raw"]), ModelShape(**config["shape"])
    rank, world = config.get("rank", 0), config.get("world", 1)
    if config["cuda"]:
        torch.cuda.set_device(rank)
    init = config.get("init") or f"file://{tempfile.mkdtemp(prefix='dwtune-pg-')}/pg"
    backend = "nccl" if config["cuda"] else "gloo"
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    reports: list[dict] = []

    def report(metrics: dict, _directory: str | None) -> None:
        reports.append(metrics)
        step = metrics[vocabulary.STEP]
        if config["role"] == "kill" and step >= config["kill_at"]:
            print(f"{KILLED_MARK} {step}", flush=True)  # the checkpoint is written
            time.sleep(3600)  # the parent SIGKILLs this process now

    kwargs = {}
    if config["role"] in ("kill", "resume"):
        kwargs["checkpoint_dir"] = config["ckpt"]
    if config["role"] == "resume":
        kwargs["resume_from"] = config["ckpt"]
    try:
        train_sharded(spec, shape, 0, report, **kwargs)
    finally:
        dist.destroy_process_group()
    if rank == 0 and config.get("out"):
        Path(config["out"]).write_text(json.dumps({"reports": reports}))
    return 0


# --------------------------------------------------------------------------- main


BODIES = {
    "mfu": check_mfu,
    "micro": check_micro,
    "fsdp": check_fsdp,
    "resume": check_resume,
    "tune": check_tune,
}


# Device nodes of a GPU driver (NVIDIA; ROCm's /dev/kfd): with none, there is no CUDA device and
# torch (seconds to import on a loaded machine) need not be asked.
GPU_DRIVER_PATHS = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/kfd")


def cuda_available() -> bool:
    if not any(os.path.exists(path) for path in GPU_DRIVER_PATHS):
        return False
    import torch

    return torch.cuda.is_available()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "output",
        nargs="?",
        default="gpu_check.json",
        help="where the JSON summary goes too (default gpu_check.json)",
    )
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu: dev mode (tiny shapes, fp32, gloo; MFU/memory not judged)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny shapes (implied by cpu)")
    hidden = argparse.SUPPRESS
    parser.add_argument("--only", type=lambda s: s.split(","), default=list(GROUPS), help=hidden)
    parser.add_argument("--inject-failure", choices=GROUPS, default=None, help=hidden)
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help=hidden)
    parser.add_argument("--cap-scale", type=float, default=1.0, help=hidden)
    parser.add_argument("--fsdp-world", type=int, default=0, help=hidden)
    parser.add_argument("--child", default=None, help=hidden)
    args = parser.parse_args(argv)
    unknown = [g for g in args.only if g not in GROUPS]
    if unknown:
        parser.error(f"--only: got {unknown}; expected some of {','.join(GROUPS)}")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.child:
        return child_main(args.child)
    if args.device == "cuda" and not cuda_available():
        print(NO_CUDA_LINE, file=sys.stderr)
        return NO_CUDA_EXIT
    stdout_fd = os.dup(1)
    os.dup2(2, 1)  # everything else (torch, NCCL, Ray) goes to stderr; stdout: the summary
    with tempfile.TemporaryDirectory(prefix="dwtune-gpu-check-") as scratch:
        run = Run(args, Path(scratch))
        run.info = info = device_info(run.cuda)
        say(
            f"{info['device_name']}, {info.get('memory_gib')} GiB, torch {info['torch']}; "
            f"checks {selected(args)} within {args.budget_s:.0f} s"
        )
        threading.Thread(target=watchdog, args=(run, info, stdout_fd), daemon=True).start()
        for group in selected(args):
            run_group(run, group, BODIES[group])
        run.kill_children()
        return emit(run, info, stdout_fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
