"""One trial trained by several processes: data parallel, parameters sharded with FSDP2.

Every process of an initialised ``torch.distributed`` process group (gloo on CPU, NCCL on
CUDA; a Ray Train job sets it up, so do the tests) runs :func:`train_sharded` with the same
arguments. Each builds the model from the trial's seed (the same initialisation as the plain
trainer), shards every block and then the whole model with ``fully_shard``, and trains on its
contiguous slice of the same global batch: rank r of W takes rows ``[r·B/W, (r+1)·B/W)``.
Every row has the same number of tokens, so the mean of the W slice means is the global mean,
and FSDP's reduce-scatter (an average over ranks) gives the plain trainer's gradient. A rank
whose rows do not fit its GPU at once runs them as micro-batches (the memory model's split of
B/W rows, :func:`dwtune.core.memory.micro_batches`), accumulating into its sharded gradients
before the one optimiser step. The global batch, the tokens and the optimiser step are the
plain trial's; the losses agree with it up to float summation order.

Every rank keeps the same progress (the reported train loss is averaged over ranks, the
held-out window losses are gathered), so all ranks take the same branches and the collectives
never wait on a rank that went elsewhere. Checkpoints hold the full, unsharded state in the
plain trainer's format (:meth:`~dwtune.backends.pytorch.train.TrainingLoop.save`): rank 0 writes it,
every rank reads it, so a sharded trial resumes from it as a one-process trial does.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor

from dwtune.backends.pytorch.model import GPT, build_model, check_shape, compile_blocks
from dwtune.backends.pytorch.perf import Peak
from dwtune.backends.pytorch.train import (
    Report,
    TrainingLoop,
    TrainStep,
    evaluate,
    lm_loss,
    make_optimizer,
    to_device,
    window_losses,
)
from dwtune.core.budget import ModelShape
from dwtune.core.errors import InputError
from dwtune.core.parametrization import Parametrization
from dwtune.core.spec import ExperimentSpec


def backend_for_device(device: torch.device) -> str:
    """The process-group backend for a device: NCCL between GPUs, gloo between CPUs."""
    return "nccl" if device.type == "cuda" else "gloo"


def check_divides(batch_size: int, world: int) -> None:
    if batch_size % world:
        raise InputError(
            f"train.batch_size: got {batch_size}; a trial sharded over {world} workers needs "
            f"a batch size divisible by {world}"
        )


def _full(value: object) -> object:
    """A DTensor's full tensor (a collective: every rank calls it), else the value."""
    return value.full_tensor() if isinstance(value, DTensor) else value


def _shard_like(value: torch.Tensor, like: object) -> torch.Tensor:
    """``value`` (a full tensor every rank holds) laid out as ``like`` (no communication)."""
    if not isinstance(like, DTensor):
        return value
    full = value.to(device=like.device, dtype=like.dtype)
    return distribute_tensor(full, like.device_mesh, like.placements, src_data_rank=None)


class Objective(nn.Module):
    """The root FSDP module: the losses go through its ``forward``, so FSDP's hooks gather
    the embeddings, final norm and head before them and reduce their gradients after (the
    plain trainer calls ``GPT.features``, which no FSDP hook sees)."""

    def __init__(self, model: GPT):
        super().__init__()
        self.model = model

    def forward(
        self, inputs: torch.Tensor, targets: torch.Tensor, per_window: bool = False
    ) -> torch.Tensor:
        if per_window:
            return window_losses(self.model, inputs, targets)  # (B,)
        return lm_loss(self.model, inputs, targets)  # mean over this rank's tokens


class ShardedStep(TrainStep):
    """The plain step (micro-batches included) through :class:`Objective`; its loss averaged
    over the ranks (the global batch's mean), its gradient norm a plain tensor (FSDP2 clips
    DTensors).

    Every micro-batch's backward reduce-scatters its gradients into the sharded ones: FSDP2
    could skip that until the last pass (``set_requires_gradient_sync``), but only by keeping
    the full unsharded gradients (4·P bytes) meanwhile, which is what sharding saves."""

    def __init__(self, objective: Objective, *args, world: int, **kwargs):
        super().__init__(objective.model, *args, **kwargs)
        self.objective, self.world = objective, world

    def __call__(
        self, inputs: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self._accumulate(inputs, targets)  # FSDP averages the ranks' gradients
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_norm)
        self.optimizer.step()
        total = loss.detach().float().clone()
        dist.all_reduce(total)  # gloo has no AVG: sum, then divide
        return total / self.world, _full(norm)  # type: ignore[return-value]

    def _loss(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.objective(inputs, targets)


class ShardedTrainer(TrainingLoop):
    """:class:`TrainingLoop` on one rank of a process group (see the module doc)."""

    def __init__(self, spec: ExperimentSpec, shape: ModelShape, seed: int):
        if not dist.is_initialized():
            raise RuntimeError("ShardedTrainer needs an initialised torch.distributed group")
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        check_divides(spec.train.batch_size, self.world)
        super().__init__(spec, shape, seed)
        # MFU against the job's peak: the global batch's tokens run on all W devices
        self.peak = Peak(self.peak.flops * self.world, f"{self.world} x {self.peak.source}")

    def _build(self, param: Parametrization) -> TrainStep:
        check_shape(self.shape)
        torch.manual_seed(self.seed)  # every rank: the plain trainer's initialisation
        model = build_model(self.shape, param).to(self.runtime.device)
        model.checkpoint_blocks = self.split.checkpointing  # before sharding, as torchtitan
        if self.runtime.compile:  # per block, before sharding (torchtitan's order)
            compile_blocks(model)
        for block in model.blocks:
            fully_shard(block)  # unsharded one block at a time in forward and backward
        objective = Objective(model)
        fully_shard(objective)  # the rest: embeddings, final norm and head
        optimizer = make_optimizer(model, self.cfg)  # over the sharded parameters
        self.objective = objective
        return ShardedStep(
            objective,
            optimizer,
            self.runtime,
            self.cfg.grad_clip,
            micro_batch=self.split.micro_batch,
            world=self.world,
        )

    def _workers(self) -> int:
        return self.world

    def _local(self, windows: np.ndarray) -> np.ndarray:
        rows = len(windows) // self.world
        return windows[self.rank * rows : (self.rank + 1) * rows]

    def _evaluate(self) -> tuple[float, float, list[float]]:
        objective, runtime = self.objective, self.runtime

        def gathered(windows: np.ndarray) -> torch.Tensor:
            """This rank's rows' losses, gathered in rank order: the batch's (B,) losses."""
            inputs, targets = to_device(self._local(windows), runtime.device)
            with runtime.autocast():
                mine = objective(inputs, targets, per_window=True)
            parts = [torch.empty_like(mine) for _ in range(self.world)]
            dist.all_gather(parts, mine.contiguous())
            return torch.cat(parts)

        return evaluate(self.step_fn, self.eval_windows, gathered)

    def _states(self) -> tuple[dict, dict]:
        model_state = {k: _full(v) for k, v in self.step_fn.model.state_dict().items()}
        optim = self.step_fn.optimizer.state_dict()
        state = {
            index: {key: _full(value) for key, value in entry.items()}
            for index, entry in optim["state"].items()
        }
        return model_state, {**optim, "state": state}

    def _load_states(self, model_state: dict, optimizer_state: dict) -> None:
        model, optimizer = self.step_fn.model, self.step_fn.optimizer
        current = model.state_dict()
        model.load_state_dict({k: _shard_like(v, current[k]) for k, v in model_state.items()})
        params = [p for group in optimizer.param_groups for p in group["params"]]
        state = {
            index: {
                key: _shard_like(value, params[index]) if value.dim() > 0 else value
                for key, value in entry.items()
            }
            for index, entry in optimizer_state["state"].items()
        }
        optimizer.load_state_dict({**optimizer_state, "state": state})

    def _writes_checkpoint(self) -> bool:
        return self.rank == 0


def train_sharded(
    spec: ExperimentSpec,
    shape: ModelShape,
    seed: int,
    report: Report,
    *,
    checkpoint_dir: str | None = None,
    resume_from: str | None = None,
    lr: float | None = None,
) -> dict:
    """:func:`~dwtune.backends.pytorch.train.train_model` on one rank of a process group.

    Every rank calls it alike; every rank's ``report`` is called at every evaluation with the
    same metrics, and with ``checkpoint_dir`` only on rank 0 (the others pass None).
    """
    if lr is not None:
        spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, lr=lr))
    trainer = ShardedTrainer(spec, shape, seed)
    if resume_from is not None:
        trainer.restore(resume_from)

    def ranked(metrics: dict, directory: str | None) -> None:
        report(metrics, directory if trainer.rank == 0 else None)

    return trainer.run(ranked, checkpoint_dir)
