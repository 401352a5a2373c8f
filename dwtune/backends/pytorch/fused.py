"""Fused seeds: k seeds of one shape trained as one model, each as it would train alone.

Rule: a :class:`~dwtune.backends.pytorch.model.FusedGPT` stacks the k models' parameters
along a leading seed axis S; seed s is initialised from its own ``torch.manual_seed`` (the
plain trainer's initialisation), reads its own data order (``train_batch`` keyed by its
seed), has its own loss (the step back-propagates their sum, whose gradient in seed s's
slice is seed s's own), its own gradient-norm clipping (the norm over its slice only), and
AdamW steps the stacked tensors elementwise. Evaluation, early stopping, divergence and
reports are per seed: each seed reports at exactly the steps, with exactly the metrics, of
its training alone (throughput is per seed: its own tokens over the shared wall time).

Guarantee: on CPU in fp32, each seed's losses equal those of its training alone up to float
rounding of batched against plain matmuls (tests/backends/test_fused.py bounds them).
A seed that finishes early (patience, divergence) keeps its slice in the step, unreported,
until every seed is done: no op mixes slices, so it changes nothing for the others.

Checkpoints: one file (the plain trainer's format) holds the stacked model and optimizer
state and every seed's progress and last metrics; restoring resumes all seeds.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from dwtune.backends.data import train_batch
from dwtune.backends.pytorch.loss import chunked_cross_entropy
from dwtune.backends.pytorch.model import FusedGPT, build_fused_model, check_shape, compile_blocks
from dwtune.backends.pytorch.train import (
    GPU_CHECK_EVERY,
    LR_SCALE,
    IntervalTotals,
    Progress,
    Runtime,
    TrainingLoop,
    TrainStep,
    choose_split,
    hidden_window_losses,
    make_optimizer,
    summarise_windows,
    to_device,
)
from dwtune.core import vocabulary
from dwtune.core.budget import ModelShape
from dwtune.core.errors import InputError
from dwtune.core.memory import MicroBatches, logit_chunk_tokens
from dwtune.core.parametrization import Parametrization
from dwtune.core.spec import ExperimentSpec, TrainConfig

CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_'s guard: coefficient max_norm / (norm + eps)

# seed -> that seed's report at this evaluation (only the seeds that report now)
FusedReport = Callable[[dict[int, dict], str | None], None]


def seed_losses(model: FusedGPT, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(S,) mean next-token cross-entropy of each seed; chunked per seed where the fused
    logits would be large (the plain trainer's rule, :func:`lm_loss`, on all S at once)."""
    rows = logit_chunk_tokens(model.shape.vocab_size, inputs.numel())
    if rows is None:
        return model.seed_losses(inputs, targets)
    hidden = model.features(inputs)  # (S, B, T, D)
    weight = model.output_weight  # (S, V, D)
    return torch.stack(
        [chunked_cross_entropy(hidden[s], weight[s], targets[s], rows) for s in range(model.seeds)]
    )


def clip_per_seed(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Clip each seed's gradient (its slice of every parameter) to ``max_norm``, as
    ``clip_grad_norm_`` would clip that seed's model alone; (S,) norms before clipping."""
    grads = [p.grad for p in params if p.grad is not None]
    squares = torch.stack([g.float().pow(2).flatten(1).sum(dim=1) for g in grads])  # (P, S)
    norms = squares.sum(dim=0).sqrt()  # (S,)
    coef = (max_norm / (norms + CLIP_EPS)).clamp(max=1.0)
    for grad in grads:
        grad.mul_(coef.view(-1, *(1,) * (grad.dim() - 1)).to(grad.dtype))  # (S, 1, ..., 1)
    return norms


class FusedTrainStep(TrainStep):
    """:class:`TrainStep` of a fused model: (S, B, T) inputs, (S,) losses and norms."""

    batch_axis = 1

    def _loss(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return seed_losses(self.model, inputs, targets)

    def _clip(self) -> torch.Tensor:
        return clip_per_seed(self.params, self.max_norm)


def build_fused_training(
    shape: ModelShape,
    cfg: TrainConfig,
    runtime: Runtime,
    seeds: Sequence[int],
    param: Parametrization | None = None,
    split: MicroBatches | None = None,
) -> FusedTrainStep:
    """:func:`~dwtune.backends.pytorch.train.build_training` for ``seeds`` fused: model s
    initialised from ``seeds[s]``; compiled blocks when enabled."""
    check_shape(shape)
    model = build_fused_model(shape, list(seeds), param).to(runtime.device)
    model.checkpoint_blocks = bool(split and split.checkpointing)
    optimizer = make_optimizer(model, cfg)
    if runtime.compile:
        compile_blocks(model)
    micro = split.micro_batch if split else None
    return FusedTrainStep(model, optimizer, runtime, cfg.grad_clip, micro)


@torch.no_grad()
def evaluate_seeds(
    step: FusedTrainStep, batches: list[np.ndarray]
) -> list[tuple[float, float, list[float]]]:
    """Each seed's :func:`~dwtune.backends.pytorch.train.evaluate` on the same windows."""
    model, runtime = step.model, step.runtime
    seeds = model.seeds
    model.eval()
    per_window = []  # one (S, B) tensor of window losses per batch
    for windows in batches:
        inputs, targets = to_device(windows, runtime.device)
        with runtime.autocast():
            hidden = model.features(inputs.expand(seeds, *inputs.shape))  # (S, B, T, D)
            per_window.append(
                torch.stack(
                    [
                        hidden_window_losses(hidden[s], model.output_weight[s], targets)
                        for s in range(seeds)
                    ]
                ).float()
            )
    model.train()
    return [summarise_windows([w[s] for w in per_window]) for s in range(seeds)]


class SeedIntervals:
    """Each seed's steps since its own last report: loss sums (S,) on the device, step
    counts and start times (a seed that reports off schedule, diverging, resets alone)."""

    def __init__(self, device: torch.device, seeds: int):
        self.loss_sum = torch.zeros(seeds, device=device)
        self.grad_norm = torch.zeros(seeds, device=device)
        self.steps = [0] * seeds
        self.starts = [time.perf_counter()] * seeds
        self.device = device

    def add(self, losses: torch.Tensor, norms: torch.Tensor) -> None:
        self.loss_sum += losses.float()
        self.grad_norm = norms
        self.steps = [n + 1 for n in self.steps]

    def non_finite(self) -> list[bool]:
        return [not math.isfinite(v) for v in self.loss_sum.tolist()]

    def totals(self, seed_index: int, now: float) -> IntervalTotals:
        steps = self.steps[seed_index]
        loss = float(self.loss_sum[seed_index]) / max(1, steps)
        norm = float(self.grad_norm[seed_index])
        return IntervalTotals(loss, norm, steps, now - self.starts[seed_index])

    def reset(self, seed_index: int, now: float) -> None:
        self.loss_sum[seed_index] = 0.0
        self.steps[seed_index] = 0
        self.starts[seed_index] = now


class FusedTrainingLoop(TrainingLoop):
    """:class:`TrainingLoop` of ``seeds`` fused (module doc); :meth:`run` returns each
    seed's last report. ``self.progress`` counts the shared steps and wall time; each seed's
    own :class:`Progress` (best loss, its step when it ended) is in ``self.seed_progress``."""

    def __init__(self, spec: ExperimentSpec, shape: ModelShape, seeds: Sequence[int]):
        if len(set(seeds)) != len(seeds) or not seeds:
            raise InputError(f"seeds: got {list(seeds)}; expected distinct seeds, at least one")
        self.seeds = tuple(seeds)
        super().__init__(spec, shape, self.seeds[0])
        self.seed_progress = [Progress() for _ in self.seeds]
        self.seed_metrics: list[dict] = [{} for _ in self.seeds]

    def _choose_split(self, spec: ExperimentSpec) -> MicroBatches:
        return choose_split(spec, self.shape, self.runtime, 1, len(self.seeds))

    def _build(self, param: Parametrization) -> TrainStep:
        return build_fused_training(
            self.shape, self.cfg, self.runtime, self.seeds, param, self.split
        )

    def _gpu_share(self) -> float:
        """Each seed's part of the GPU the trial holds (k seeds' shares, at most one GPU)."""
        whole = super()._gpu_share()
        return min(len(self.seeds) * whole, 1.0) / len(self.seeds) if whole else 0.0

    def _running(self) -> list[int]:
        """Indices of the seeds that have not ended."""
        return [i for i, m in enumerate(self.seed_metrics) if vocabulary.STATUS not in m]

    # ------------------------------------------------------------------ checkpoints

    def _seed_list(self) -> list[int]:
        return list(self.seeds)

    def _trainer_state(self) -> dict:
        return {
            **super()._trainer_state(),
            "seed_progress": [dataclasses.asdict(p) for p in self.seed_progress],
            "seed_metrics": self.seed_metrics,
        }

    def _restore_progress(self, state: dict) -> None:
        super()._restore_progress(state)
        self.seed_progress = [Progress(**p) for p in state["seed_progress"]]
        self.seed_metrics = state["seed_metrics"]

    # ------------------------------------------------------------------ training

    def train_one(self) -> tuple[torch.Tensor, torch.Tensor]:
        step = self.progress.step
        lr = self.cfg.lr_at(step, self.total_steps)
        for group in self.step_fn.optimizer.param_groups:
            group["lr"] = lr * group.get(LR_SCALE, 1.0)
        windows = np.stack(  # (S, B, T + 1): seed s's batch of this step
            [
                train_batch(self.train_tokens, seed, step, self.cfg.batch_size, self.shape.seq_len)
                for seed in self.seeds
            ]
        )
        self.corpus.check_ids(windows, "train")
        losses, norms = self.step_fn(*to_device(windows, self.runtime.device))
        self.progress.step += 1
        for index in self._running():
            self.seed_progress[index].step = self.progress.step
        return losses, norms

    def _due(self, intervals: SeedIntervals) -> tuple[list[int], set[int]]:
        """(seeds that report now, those of them that diverged): every running seed at an
        evaluation step or the end, else those whose loss turned non-finite."""
        step = self.progress.step
        running = self._running()
        every = GPU_CHECK_EVERY if self.runtime.cuda else 1
        bad = intervals.non_finite() if step % every == 0 else [False] * len(self.seeds)
        diverged = {i for i in running if bad[i]}
        if step % self.cfg.eval_every == 0 or step >= self.total_steps:
            return running, diverged
        return sorted(diverged), diverged

    def _reports(self, due: list[int], diverged: set[int], intervals, started) -> dict:
        """seed -> its report, for the seeds in ``due`` (evaluated together, once)."""
        healthy = [i for i in due if i not in diverged]
        evaluations = evaluate_seeds(self.step_fn, self.eval_windows) if healthy else []
        now = time.perf_counter()
        reports = {}
        for index in due:
            totals = intervals.totals(index, now)
            result = evaluations[index] if evaluations else (math.nan, math.nan, [])
            metrics = self.seed_report(
                self.seed_progress[index], totals, index in diverged, started, lambda r=result: r
            )
            self.seed_metrics[index] = metrics
            reports[self.seeds[index]] = dict(metrics)
            intervals.reset(index, now)
        self.progress.elapsed_s = time.perf_counter() - started
        return reports

    def final_reports(self) -> dict[int, dict]:
        return {seed: dict(m) for seed, m in zip(self.seeds, self.seed_metrics, strict=True)}

    def run_seeds(
        self,
        report: FusedReport,
        checkpoint_dir: str | None = None,
        on_step: Callable[[int], None] | None = None,
    ) -> dict[int, dict]:
        """Train until every seed has ended; seed -> its last report."""
        if not self._running():  # restored from a final checkpoint
            return self.final_reports()
        started = time.perf_counter() - self.progress.elapsed_s
        intervals = SeedIntervals(self.runtime.device, len(self.seeds))
        while self._running():
            intervals.add(*self.train_one())
            if on_step:
                on_step(self.progress.step)
            due, diverged = self._due(intervals)
            if not due:
                continue
            reports = self._reports(due, diverged, intervals, started)
            if checkpoint_dir is not None:
                self.save(checkpoint_dir)
            report(reports, checkpoint_dir)
        return self.final_reports()


def train_fused(
    spec: ExperimentSpec,
    shape: ModelShape,
    seeds: Sequence[int],
    report: FusedReport,
    *,
    checkpoint_dir: str | None = None,
    resume_from: str | None = None,
    lr: float | None = None,
    on_step: Callable[[int], None] | None = None,
) -> dict[int, dict]:
    """Train ``seeds`` of ``shape`` fused (the module's rule); seed -> its last report.

    As :func:`~dwtune.backends.pytorch.train.train_model` per seed: ``report(reports,
    checkpoint_dir)`` at every evaluation with the reports of the seeds that report then
    (seed -> metrics), the state saved to ``checkpoint_dir`` right before; ``resume_from``
    continues every seed from such a checkpoint.
    """
    if lr is not None:
        spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, lr=lr))
    trainer = FusedTrainingLoop(spec, shape, seeds)
    if resume_from is not None:
        trainer.restore(resume_from)
    return trainer.run_seeds(report, checkpoint_dir, on_step)
