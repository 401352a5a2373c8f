"""The torch trainer: one trial trains one model and reports through a callback.

:func:`train_model` is the ``torch`` backend of :mod:`dwtune.backends.trial`.
It runs anywhere (pytest,
``dwtune train``, a Ray Tune trial) because all it needs is a ``report(metrics, checkpoint_dir)``
callback. The training step (:class:`TrainStep`) is the one that ``dwtune bench`` times.

Device choices: on CUDA, bf16 autocast, TF32 matmuls, fused AdamW and regional
``torch.compile`` of the repeated block; on CPU, fp32, fused AdamW (faster than foreach and the
for-loop default here, see benchmarks/README.md) and eager mode (compiling measured slower on
CPU and costs seconds per shape). Same seed and spec on CPU: identical losses.

Checkpoints: :meth:`TrainingLoop.save` writes the whole state to one file (``torch.save`` copies
each tensor to host memory as it writes it); :meth:`TrainingLoop.restore` loads it with
``map_location="cpu"`` and copies it into the model and optimizer on the device, so no second
copy of the state is ever materialised on a GPU. A directory a sharded trial saved
(:mod:`dwtune.backends.pytorch.checkpoint`, one file of shards per rank) restores here too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from dwtune.backends.data import eval_batches, prepare_corpus, train_batch
from dwtune.backends.pytorch import checkpoint as sharded_checkpoint
from dwtune.backends.pytorch.loss import chunked_cross_entropy
from dwtune.backends.pytorch.model import (
    GPT,
    FusedGPT,
    build_model,
    check_shape,
    compile_blocks,
)
from dwtune.backends.pytorch.perf import Peak, mfu, peak_flops, synchronize, tune_cpu_allocator
from dwtune.core import vocabulary
from dwtune.core.budget import ModelShape, flops_per_token
from dwtune.core.errors import InputError
from dwtune.core.memory import (
    MicroBatches,
    gpu_share_bytes,
    logit_chunk_tokens,
    micro_batches,
    usable_gpu_bytes,
)
from dwtune.core.parametrization import Parametrization, for_shape
from dwtune.core.spec import SPLIT_FIELDS, ExperimentSpec, ResourcesConfig, TrainConfig
from dwtune.storage.store import atomic_file

THREADS_ENV = "DWTUNE_THREADS"  # intra-op threads; else OMP_NUM_THREADS (Ray sets it per trial)
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
CHECKPOINT_FILE = "state.pt"
CHECKPOINT_VERSION = 1
GPU_CHECK_EVERY = 16  # steps between loss finiteness checks on GPU (each check waits for it)
# Window losses a record keeps (blocks of consecutive windows beyond it): enough for the paired
# evaluation error's sd to be within ~5% of its value, small enough for a JSON record.
MAX_EVAL_BLOCKS = 256

Report = Callable[[dict, str | None], None]


# --------------------------------------------------------------------------- runtime


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    compile: bool
    threads: int
    # bf16 autocast on CUDA; False where the parameters are already bf16 in compute (a
    # sharded trial's FSDP2 mixed-precision policy), so no autocast copy of them is made
    autocast_bf16: bool = True

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast on CUDA (unless ``autocast_bf16`` is off); plain fp32 on CPU."""
        if self.cuda and self.autocast_bf16:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()


def resolve_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise InputError(
            "device: got 'cuda' but CUDA is not available on this machine; use device cpu or auto"
        )
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name not in ("cpu", "cuda"):
        raise InputError(f"device: got {name!r}; expected auto, cpu or cuda")
    return torch.device(name)


def resolve_compile(setting: str | bool | None, device: torch.device) -> bool:
    """auto/None: compile on CUDA only (on CPU it measured slower and costs seconds)."""
    if setting in (None, "auto"):
        return device.type == "cuda"
    return setting in (True, "true")


def configure_threads() -> int:
    """Respect the CPUs a trial was given: DWTUNE_THREADS, else OMP_NUM_THREADS, else all."""
    for name in (THREADS_ENV, "OMP_NUM_THREADS"):
        raw = os.environ.get(name, "")
        if raw.strip().isdigit() and int(raw) >= 1:
            torch.set_num_threads(int(raw))
            break
    return torch.get_num_threads()


def set_inductor_cache(cache_dir: str) -> None:
    """One inductor cache per node (shared file systems and many writers do not mix)."""
    if INDUCTOR_CACHE_ENV not in os.environ:
        node_dir = Path(cache_dir).expanduser() / "inductor" / socket.gethostname()
        os.environ[INDUCTOR_CACHE_ENV] = str(node_dir)


def configure_runtime(device: str, compile_setting: str | bool | None, cache_dir: str) -> Runtime:
    resolved = resolve_device(device)
    threads = configure_threads()
    if resolved.type == "cuda":
        torch.set_float32_matmul_precision("high")  # TF32 for what autocast leaves in fp32
    else:
        tune_cpu_allocator()
    use_compile = resolve_compile(compile_setting, resolved)
    if use_compile:
        set_inductor_cache(cache_dir)
    return Runtime(resolved, use_compile, threads)


# --------------------------------------------------------------------------- the step


ADAM_EPS = 1e-8  # torch's default; CompleteP scales it per group
LR_SCALE = "lr_scale"  # param-group key: the group's rate is lr_scale × the schedule's


def make_optimizer(model: GPT | FusedGPT, cfg: TrainConfig) -> torch.optim.AdamW:
    """Fused AdamW; weight decay on matrices and embeddings, not on LayerNorm parameters.

    AdamW is elementwise (no per-tensor statistic), so on a fused model's stacked parameters
    each seed's slice takes exactly the update its own optimizer would.

    Under mup and completep the hidden matrices are their own group, with rate ``lr/m`` (and
    under completep their decay ×m, ε ×1/(m·m_L), the vector-like ε ×1/m_L); under sp the
    two groups are today's, each with lr_scale 1.
    """
    param = model.param
    hidden_ids = (
        {id(p) for p in model.hidden_matrices()}
        if param.name != vocabulary.Parametrization.SP
        else set()
    )
    params = list(model.parameters())
    axes = model.seed_axes  # a fused model's parameters are (S, *one seed's shape)
    hidden = [p for p in params if id(p) in hidden_ids]
    matrices = [p for p in params if p.dim() - axes >= 2 and id(p) not in hidden_ids]
    vectors = [p for p in params if p.dim() - axes < 2]
    groups = [
        _group(matrices, cfg.weight_decay, 1.0, ADAM_EPS * param.vector_eps_scale()),
        _group(vectors, 0.0, 1.0, ADAM_EPS * param.vector_eps_scale()),
    ]
    if hidden:
        decay = cfg.weight_decay * param.hidden_weight_decay_scale()
        eps = ADAM_EPS * param.hidden_eps_scale()
        groups.append(_group(hidden, decay, param.hidden_lr_scale(), eps))
    return torch.optim.AdamW(
        groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=ADAM_EPS, fused=True
    )


def _group(params: list, weight_decay: float, lr_scale: float, eps: float) -> dict:
    return {"params": params, "weight_decay": weight_decay, LR_SCALE: lr_scale, "eps": eps}


def lm_loss(model: GPT, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy; chunked where the full logits would be large."""
    rows = logit_chunk_tokens(model.shape.vocab_size, inputs.numel())
    if rows is None:
        return model.loss(inputs, targets)
    return chunked_cross_entropy(model.features(inputs), model.output_weight, targets, rows)


def _changed_keys(saved: dict, current: dict) -> list[str]:
    """Training settings that differ; how a batch is split (SPLIT_FIELDS) may change."""
    keys = (set(saved) | set(current)) - set(SPLIT_FIELDS)
    return sorted(k for k in keys if saved.get(k) != current.get(k))


class TrainStep:
    """One update: forward and loss (autocast on CUDA), backward, clipping, AdamW.

    With ``micro_batch`` set below the batch, the batch runs as several forward/backward
    passes of at most that many sequences whose gradients accumulate before the one optimiser
    step: each pass's mean loss is weighted by its share of the batch's sequences (every
    sequence has T tokens), so the gradient and the loss are the whole batch's token mean.
    """

    batch_axis = 0  # the axis of the inputs that indexes sequences (a fused step's is 1)

    def __init__(
        self,
        model: GPT,
        optimizer: torch.optim.Optimizer,
        runtime: Runtime,
        grad_clip: float,
        micro_batch: int | None = None,
    ):
        self.model = model
        self.optimizer = optimizer
        self.runtime = runtime
        self.micro_batch = micro_batch
        self.params = list(model.parameters())
        # max_norm = inf still returns the norm (reported as grad_norm) without clipping
        self.max_norm = grad_clip if grad_clip > 0 else math.inf

    def __call__(
        self, inputs: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Loss (before the update) and pre-clipping gradient norm, as device tensors."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = self._accumulate(inputs, targets)
        norm = self._clip()
        self.optimizer.step()
        return loss, norm

    def _clip(self) -> torch.Tensor:
        """Scale the gradients to norm ``max_norm`` at most; the norm before scaling."""
        return torch.nn.utils.clip_grad_norm_(self.params, self.max_norm)

    def _loss(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean loss of these rows (a sharded step goes through its FSDP root module)."""
        return lm_loss(self.model, inputs, targets)

    def _accumulate(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # a fused step's loss is one per seed (S,): their sum's gradient is each seed's own
        axis = self.batch_axis
        batch = inputs.shape[axis]
        size = self.micro_batch or batch
        if size >= batch:  # one pass: exactly the unsplit step
            with self.runtime.autocast():
                loss = self._loss(inputs, targets)
            loss.sum().backward()
            return loss.detach()
        total = torch.zeros((), device=inputs.device)
        parts = zip(inputs.split(size, axis), targets.split(size, axis), strict=True)
        for part_in, part_target in parts:
            share = part_in.shape[axis] / batch  # (b, T) of the (B, T) batch
            with self.runtime.autocast():
                loss = self._loss(part_in, part_target) * share
            loss.sum().backward()
            total = total + loss.detach().float()
        return total


def to_device(windows: np.ndarray, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., B, T + 1) token windows -> (inputs, targets), each (..., B, T), on ``device``."""
    tokens = torch.from_numpy(windows)
    if device.type == "cuda":
        tokens = tokens.pin_memory().to(device, non_blocking=True)
    return tokens[..., :-1], tokens[..., 1:]


def build_training(
    shape: ModelShape,
    cfg: TrainConfig,
    runtime: Runtime,
    seed: int,
    param: Parametrization | None = None,
    split: MicroBatches | None = None,
) -> TrainStep:
    """Model (initialised from ``seed``), optimizer and step; compiled blocks when enabled;
    ``split``: micro-batches and activation checkpointing (None: the whole batch at once)."""
    check_shape(shape)
    torch.manual_seed(seed)  # same seed, same initialisation (paired seeds)
    model = build_model(shape, param).to(runtime.device)
    model.checkpoint_blocks = bool(split and split.checkpointing)
    optimizer = make_optimizer(model, cfg)
    if runtime.compile:
        compile_blocks(model)
    micro = split.micro_batch if split else None
    return TrainStep(model, optimizer, runtime, cfg.grad_clip, micro)


def trial_memory_bytes(resources: ResourcesConfig, runtime: Runtime) -> float | None:
    """What one trial may use of its GPU (bytes): its share (resources.gpu) of the memory the
    device reports, capped by resources.gpu_memory_gb (the plan's rule,
    :func:`dwtune.core.memory.usable_gpu_bytes`); None on CPU (no limit)."""
    if not runtime.cuda:
        return None
    reported = torch.cuda.get_device_properties(runtime.device).total_memory
    total = usable_gpu_bytes(reported, resources.gpu_memory_gb)
    if total is None:
        return None
    return gpu_share_bytes(total, resources.gpu if resources.gpu > 0 else 1.0)


def choose_split(
    spec: ExperimentSpec, shape: ModelShape, runtime: Runtime, workers: int = 1, seeds: int = 1
) -> MicroBatches:
    """Micro-batch and checkpointing of one process of a trial over ``workers`` (its
    batch_size/workers rows), training ``seeds`` fused seeds: the spec's, else from the
    memory model (:func:`dwtune.core.memory.micro_batches`, the rule ``dwtune plan`` shows
    per cell)."""
    cfg = spec.train
    return micro_batches(
        shape,
        cfg.batch_size // workers,
        2 if runtime.cuda else 4,
        trial_memory_bytes(spec.resources, runtime),
        cfg.micro_batch_size,
        cfg.checkpointing,
        workers,
        seeds,
    )


def atomic_torch_save(state: dict, path: Path) -> None:
    """torch.save streamed into an atomic file (a large state need not fit in memory twice)."""
    with atomic_file(path) as handle:
        torch.save(state, handle)


def window_losses(model: GPT, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of each window (B,), logits a chunk of rows at a time."""
    return hidden_window_losses(model.features(inputs), model.output_weight, targets)


def hidden_window_losses(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """(B,) mean cross-entropy per window of (B, T, D) ``hidden`` through the (V, D) ``weight``
    against (B, T) ``targets``, a chunk of rows of logits at a time."""
    batch, length = targets.shape
    rows_of = hidden.reshape(batch * length, -1)  # (B·T, D)
    flat = targets.reshape(-1)
    rows = logit_chunk_tokens(weight.shape[0], flat.numel()) or flat.numel()
    per_token = torch.empty(flat.numel(), device=flat.device, dtype=torch.float32)
    for start in range(0, flat.numel(), rows):
        logits = F.linear(rows_of[start : start + rows], weight).float()
        per_token[start : start + rows] = F.cross_entropy(
            logits, flat[start : start + rows], reduction="none"
        )
    return per_token.view(batch, length).mean(dim=1)


def window_blocks(losses: np.ndarray, blocks: int = MAX_EVAL_BLOCKS) -> list[float]:
    """Per-window losses averaged over consecutive blocks when there are more than ``blocks``
    windows (the paired evaluation error only needs blocks the same for every net)."""
    if losses.size <= blocks:
        return [float(v) for v in losses]
    return [float(chunk.mean()) for chunk in np.array_split(losses, blocks)]


WindowLosses = Callable[[np.ndarray], torch.Tensor]


@torch.no_grad()
def evaluate(
    step: TrainStep, batches: list[np.ndarray], losses_of: WindowLosses | None = None
) -> tuple[float, float, list[float]]:
    """Mean loss over the fixed held-out windows, its standard error over the batches (nats
    per token; NaN with one batch), and each window's loss (blocked, :func:`window_blocks`):
    every trial of a spec is scored on the same windows, so two nets' losses are paired.
    ``losses_of(windows)``: the (B,) window losses of one batch (a sharded trial computes its
    rows and gathers the rest); by default :func:`window_losses` in this process."""
    model, runtime = step.model, step.runtime

    def here(windows: np.ndarray) -> torch.Tensor:
        with runtime.autocast():
            return window_losses(model, *to_device(windows, runtime.device))

    model.eval()
    per_window = [(losses_of or here)(windows).float() for windows in batches]
    model.train()
    return summarise_windows(per_window)


def summarise_windows(per_window: list[torch.Tensor]) -> tuple[float, float, list[float]]:
    """Mean, standard error over the batches and blocked window losses of one net's
    (B,) window losses per evaluation batch (:func:`evaluate`)."""
    losses = torch.cat(per_window)  # equal batch sizes: the batch mean of means is the mean
    per_batch = torch.stack([w.mean() for w in per_window])
    count = len(per_window)
    se = per_batch.std() / math.sqrt(count) if count > 1 else math.nan
    return float(losses.mean()), float(se), window_blocks(losses.cpu().numpy())


# --------------------------------------------------------------------------- the loop


@dataclass
class Progress:
    """What a checkpoint restores besides model and optimizer."""

    step: int = 0
    best_val: float = math.inf
    best_step: int = 0
    elapsed_s: float = 0.0  # wall time of earlier segments of a resumed run
    best_windows: list = dataclasses.field(default_factory=list)  # window losses at best_val


@dataclass(frozen=True)
class IntervalTotals:
    """One seed's training steps since its last report, as plain numbers."""

    train_loss: float  # mean over the steps (nats per token)
    grad_norm: float  # at the last step, before clipping
    steps: int
    seconds: float


class Interval:
    """Training steps since the last report: loss sum on the device, wall time."""

    def __init__(self, device: torch.device, seeds: tuple[int, ...] = ()):
        self.device = device
        self.seeds = seeds  # () one seed; (S,) a fused step's per-seed losses and norms
        self.reset()

    def reset(self) -> None:
        self.loss_sum = torch.zeros(self.seeds, device=self.device)
        self.steps = 0
        self.grad_norm = torch.zeros(self.seeds, device=self.device)
        self.start = time.perf_counter()

    def add(self, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        self.loss_sum += loss.float()
        self.grad_norm = grad_norm
        self.steps += 1

    def finite(self) -> bool:
        return math.isfinite(float(self.loss_sum))

    def seconds(self) -> float:
        synchronize(self.device)
        return time.perf_counter() - self.start


class TrainingLoop:
    """One trial's model, data and progress; :meth:`run` trains to the end."""

    def __init__(self, spec: ExperimentSpec, shape: ModelShape, seed: int):
        check_shape(shape)
        self.cfg, self.shape, self.seed = spec.train, shape, seed
        self.resources = spec.resources
        self.runtime = configure_runtime(self.cfg.device, self.cfg.compile, spec.data.cache_dir)
        self.corpus = corpus = prepare_corpus(spec.data)
        corpus.check_fits(shape.seq_len, shape.vocab_size)
        self.train_tokens = corpus.train()
        self.eval_windows = eval_batches(
            corpus.val(), self.cfg.eval_batches, self.cfg.batch_size, shape.seq_len
        )
        for windows in self.eval_windows:
            corpus.check_ids(windows, "val")
        self.split = self._choose_split(spec)
        self.step_fn = self._build(for_shape(spec.model, shape))
        self.total_steps = self.cfg.total_steps(shape.seq_len)
        self.tokens_per_step = self.cfg.batch_size * shape.seq_len
        self.flops_per_token = flops_per_token(shape)
        self.peak: Peak = peak_flops(self.runtime.device)
        self.progress = Progress()
        self.last_metrics: dict = {}

    # ------------------------------------------------------------------ hooks (sharding)

    def _workers(self) -> int:
        """Processes that train this trial together (1 here)."""
        return 1

    def _choose_split(self, spec: ExperimentSpec) -> MicroBatches:
        """Micro-batches of this process's rows by the memory model (:func:`choose_split`)."""
        return choose_split(spec, self.shape, self.runtime, self._workers())

    def _gpu_share(self) -> float:
        """GPUs this process holds: 0 on CPU, its resources.gpu on CUDA (a packed trial's
        fraction; a whole one where the spec asked for none but the device is a GPU)."""
        if not self.runtime.cuda:
            return 0.0
        return self.resources.gpu if self.resources.gpu > 0 else 1.0

    def _build(self, param: Parametrization) -> TrainStep:
        """Model, optimizer and step (a sharded trainer shards the model first, and splits
        its B/N rows into micro-batches by the same rule)."""
        return build_training(self.shape, self.cfg, self.runtime, self.seed, param, self.split)

    def _local(self, windows: np.ndarray) -> np.ndarray:
        """The rows of a global batch this process trains on (all of them here)."""
        return windows

    def _evaluate(self) -> tuple[float, float, list[float]]:
        return evaluate(self.step_fn, self.eval_windows)

    # ------------------------------------------------------------------ checkpoints

    def _trainer_state(self) -> dict:
        """What a checkpoint holds besides the model and optimizer tensors (small)."""
        return {
            "version": CHECKPOINT_VERSION,
            "seed": self.seed,
            "seeds": self._seed_list(),
            "shape": dataclasses.asdict(self.shape),
            "train": dataclasses.asdict(self.cfg),
            "progress": dataclasses.asdict(self.progress),
            "rng": torch.get_rng_state(),
            "last_metrics": self.last_metrics,
        }

    def save(self, directory: str) -> None:
        """The whole state in one file (:data:`CHECKPOINT_FILE`), written atomically."""
        step = self.step_fn
        state = {
            **self._trainer_state(),
            "model": step.model.state_dict(),
            "optimizer": step.optimizer.state_dict(),
        }
        atomic_torch_save(state, Path(directory) / CHECKPOINT_FILE)

    def restore(self, directory: str) -> None:
        """Continue from a checkpoint: this trainer's own file, or a sharded trial's
        directory (its shards, resharded into this one process)."""
        folder = Path(directory).expanduser()
        path = folder / CHECKPOINT_FILE
        if not path.is_file() and (folder / sharded_checkpoint.TRAINER_FILE).is_file():
            self._restore_shards(folder)
            return
        if not path.is_file():
            raise InputError(
                f"resume_from: {path} does not exist; pass a directory this "
                f"trainer saved a checkpoint to"
            )
        state = self._load_checkpoint(path)
        self._check_resumable(state, path)
        # CPU tensors copied into the device's: the state is on the GPU once, as in training
        self.step_fn.model.load_state_dict(state["model"])
        self.step_fn.optimizer.load_state_dict(state["optimizer"])
        self._restore_progress(state)

    def _restore_shards(self, folder: Path) -> None:
        """Restore a directory of torch.distributed.checkpoint shards (every rank's files)
        and its small trainer file."""
        path = folder / sharded_checkpoint.TRAINER_FILE
        state = self._load_checkpoint(path)
        self._check_resumable(state, path)
        sharded_checkpoint.load(self.step_fn.model, self.step_fn.optimizer, folder)
        self._restore_progress(state)

    def _seed_list(self) -> list[int]:
        """The seeds this trainer trains (one here; a fused trainer's several)."""
        return [self.seed]

    def _check_resumable(self, state: dict, path: Path) -> None:
        seeds = state.get("seeds", [state["seed"]])  # a checkpoint before fused seeds: one
        if seeds != self._seed_list() or state["shape"] != dataclasses.asdict(self.shape):
            raise InputError(
                f"resume_from: {path} holds seeds {seeds} and shape "
                f"{state['shape']}, not this trial's; pass this trial's checkpoint"
            )
        changed = _changed_keys(state.get("train", {}), dataclasses.asdict(self.cfg))
        if changed:
            raise InputError(
                f"resume_from: {path} was trained with other settings (changed: "
                f"{', '.join(changed)}); resume with the original train settings or start afresh"
            )

    def _restore_progress(self, state: dict) -> None:
        self.progress = Progress(**state["progress"])
        torch.set_rng_state(state["rng"].cpu())
        self.last_metrics = state["last_metrics"]

    def _load_checkpoint(self, path: Path) -> dict:
        """A checkpoint file read into host memory (``map_location="cpu"``): restoring copies
        it into the device's tensors, never a second full state on the device."""
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(state, dict) or state.get("version") != CHECKPOINT_VERSION:
                raise ValueError("not a dwtune checkpoint of this version")
            return state
        except Exception as exc:  # torch raises many kinds for a damaged file
            raise InputError(
                f"resume_from: {path} is not a readable checkpoint ({type(exc).__name__}); "
                f"pass another checkpoint or drop --resume-from"
            ) from None

    # ------------------------------------------------------------------ training

    def train_one(self) -> tuple[torch.Tensor, torch.Tensor]:
        step = self.progress.step
        lr = self.cfg.lr_at(step, self.total_steps)
        for group in self.step_fn.optimizer.param_groups:
            group["lr"] = lr * group.get(LR_SCALE, 1.0)
        windows = train_batch(
            self.train_tokens, self.seed, step, self.cfg.batch_size, self.shape.seq_len
        )
        self.corpus.check_ids(windows, "train")  # a max over the batch: far below a step's cost
        loss, norm = self.step_fn(*to_device(self._local(windows), self.runtime.device))
        self.progress.step += 1
        return loss, norm

    def should_report(self, interval: Interval) -> tuple[bool, bool]:
        """(report now, diverged): at evaluation steps, the end, or a non-finite loss."""
        step = self.progress.step
        every = GPU_CHECK_EVERY if self.runtime.cuda else 1
        diverged = step % every == 0 and not interval.finite()
        due = step % self.cfg.eval_every == 0 or step >= self.total_steps
        return diverged or due, diverged

    def summarise(self, interval: Interval, diverged: bool, started: float) -> dict:
        """Evaluate (unless diverged) and build the report in the metric vocabulary."""
        seconds = interval.seconds()
        train_loss = float(interval.loss_sum) / max(1, interval.steps)
        totals = IntervalTotals(train_loss, float(interval.grad_norm), interval.steps, seconds)
        return self.seed_report(self.progress, totals, diverged, started, self._evaluate)

    def seed_report(
        self,
        progress: Progress,
        totals: IntervalTotals,
        diverged: bool,
        started: float,
        evaluate: Callable[[], tuple[float, float, list[float]]],
    ) -> dict:
        """One seed's report: ``evaluate()`` (unless diverged) updates its best, then the
        metrics of its interval and the status that ends it, if any."""
        diverged = diverged or not math.isfinite(totals.train_loss)
        no_eval = (math.nan, math.nan, [])
        val, val_se, windows = no_eval if diverged else evaluate()
        diverged = diverged or not math.isfinite(val)
        if not diverged and val < progress.best_val:
            progress.best_val, progress.best_step = val, progress.step
            progress.best_windows = windows
        seconds = totals.seconds
        tokens_per_s = totals.steps * self.tokens_per_step / seconds
        progress.elapsed_s = time.perf_counter() - started
        step = progress.step
        report = {
            vocabulary.TRAIN_LOSS: totals.train_loss,
            vocabulary.VAL_LOSS: val,
            vocabulary.VAL_LOSS_SE: val_se,
            vocabulary.VAL_BEST_LOSS: (
                progress.best_val if math.isfinite(progress.best_val) else math.nan
            ),
            vocabulary.STEP: step,
            vocabulary.TOKENS: step * self.tokens_per_step,
            vocabulary.LR: self.cfg.lr_at(step - 1, self.total_steps),
            vocabulary.GRAD_NORM: totals.grad_norm,
            vocabulary.TOKENS_PER_S: tokens_per_s,
            vocabulary.STEP_TIME_S: seconds / max(1, totals.steps),
            vocabulary.MFU: mfu(self.flops_per_token, tokens_per_s, self.peak),
            vocabulary.ELAPSED_S: progress.elapsed_s,
            vocabulary.WORKERS: self._workers(),
            vocabulary.GPUS: self._workers() * self._gpu_share(),
        }
        status = self.final_status(diverged, progress)
        if status:
            report[vocabulary.STATUS] = status
            report[vocabulary.VAL_WINDOWS] = list(progress.best_windows)
        return report

    def final_status(self, diverged: bool, progress: Progress | None = None) -> str | None:
        progress = progress or self.progress
        if diverged:
            return vocabulary.STATUS_DIVERGED
        if progress.step >= self.total_steps:
            return vocabulary.STATUS_FINISHED
        patience = self.cfg.patience
        if patience is not None and progress.step - progress.best_step >= patience:
            return vocabulary.STATUS_EARLY_STOPPED
        return None

    def run(
        self,
        report: Report,
        checkpoint_dir: str | None = None,
        on_step: Callable[[int], None] | None = None,
    ) -> dict:
        """Train until finished, early stopped or diverged; returns the last report."""
        if vocabulary.STATUS in self.last_metrics:  # restored from a final checkpoint
            return dict(self.last_metrics)
        started = time.perf_counter() - self.progress.elapsed_s
        interval = Interval(self.runtime.device)
        while True:
            interval.add(*self.train_one())
            if on_step:
                on_step(self.progress.step)
            due, diverged = self.should_report(interval)
            if not due:
                continue
            self.last_metrics = self.summarise(interval, diverged, started)
            if checkpoint_dir is not None:
                self.save(checkpoint_dir)
            report(dict(self.last_metrics), checkpoint_dir)
            if vocabulary.STATUS in self.last_metrics:
                return dict(self.last_metrics)
            interval.reset()


def train_model(
    spec: ExperimentSpec,
    shape: ModelShape,
    seed: int,
    report: Report,
    *,
    checkpoint_dir: str | None = None,
    resume_from: str | None = None,
    lr: float | None = None,
    on_step: Callable[[int], None] | None = None,
) -> dict:
    """Train one model (the torch backend of :mod:`dwtune.backends.trial`); returns the last report.

    ``report(metrics, checkpoint_dir)`` runs at every evaluation and at the end; with
    ``checkpoint_dir`` the full state is saved there (atomically) right before each report.
    ``resume_from`` continues such a checkpoint to the same result as an uninterrupted run.
    ``lr`` replaces ``spec.train.lr`` (a rate found for this shape). ``on_step(step)`` is
    called after every update (progress bars).
    """
    if lr is not None:
        spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, lr=lr))
    trainer = TrainingLoop(spec, shape, seed)
    if resume_from is not None:
        trainer.restore(resume_from)
    return trainer.run(report, checkpoint_dir, on_step)
