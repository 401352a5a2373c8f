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

Precision: on CUDA, FSDP2 runs with a mixed-precision policy (bf16 parameters gathered for
compute, gradients reduced in fp32 into the fp32 sharded master weights) instead of autocast,
so no rank keeps a bf16 copy of the whole model; on CPU (gloo) everything stays fp32, as in
the plain trainer.

Every rank keeps the same progress (the reported train loss is averaged over ranks, the
held-out window losses are gathered), so all ranks take the same branches and the collectives
never wait on a rank that went elsewhere.

Checkpoints (:mod:`dwtune.backends.pytorch.checkpoint`): every rank saves the shards it holds
with ``torch.distributed.checkpoint`` into its own ``checkpoint_dir`` (a node's local scratch),
in files no other rank names (``__<rank>_0.distcp``; rank 0 adds DCP's ``.metadata`` and the
small trainer file), and every rank reports its directory. Once those directories are copied
into one folder (Ray Train's merge of a distributed checkpoint), the folder resumes the trial
over any number of ranks, or in one process. Rule: no rank ever gathers the full model or
optimizer state onto a device to save or load it; shards pass through host memory.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from dwtune.backends.pytorch import checkpoint as sharded_checkpoint
from dwtune.backends.pytorch.model import GPT, build_model, check_shape, compile_blocks
from dwtune.backends.pytorch.perf import Peak
from dwtune.backends.pytorch.train import (
    Report,
    TrainingLoop,
    TrainStep,
    atomic_torch_save,
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
    """A DTensor's full tensor (a collective: every rank calls it), else the value; for the
    step's scalar gradient norm only, never for model or optimizer state."""
    return value.full_tensor() if isinstance(value, DTensor) else value


def mixed_precision(device: torch.device) -> MixedPrecisionPolicy | None:
    """FSDP2's policy on CUDA: bf16 parameters for compute, fp32 gradient reduction (the
    master weights and optimizer state stay fp32 shards); None on CPU (fp32 throughout)."""
    if device.type != "cuda":
        return None
    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


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
        policy = mixed_precision(self.runtime.device)
        if policy is not None:  # the policy casts the parameters: no autocast on this path
            self.runtime = dataclasses.replace(self.runtime, autocast_bf16=False)
        shard = {"mp_policy": policy} if policy is not None else {}
        torch.manual_seed(self.seed)  # every rank: the plain trainer's initialisation
        model = build_model(self.shape, param).to(self.runtime.device)
        model.checkpoint_blocks = self.split.checkpointing  # before sharding, as torchtitan
        if self.runtime.compile:  # per block, before sharding (torchtitan's order)
            compile_blocks(model)
        for block in model.blocks:
            fully_shard(block, **shard)  # unsharded one block at a time in forward and backward
        objective = Objective(model)
        fully_shard(objective, **shard)  # the rest: embeddings, final norm and head
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

    def save(self, directory: str) -> None:
        """Every rank: its shards into ``directory`` (its own; see the module doc); rank 0
        also the small trainer file, once every rank's shards are written."""
        sharded_checkpoint.save(self.step_fn.model, self.step_fn.optimizer, directory)
        if self.rank == 0:
            path = Path(directory) / sharded_checkpoint.TRAINER_FILE
            atomic_torch_save(self._trainer_state(), path)

    def restore(self, directory: str) -> None:
        """Every rank: the small trainer file (read to CPU) and its shards, from a folder that
        holds every rank's files."""
        folder = Path(directory).expanduser()
        if not (folder / sharded_checkpoint.TRAINER_FILE).is_file():
            raise InputError(
                f"resume_from: {folder / sharded_checkpoint.TRAINER_FILE} does not exist; pass "
                f"the folder holding every rank's files of this trial's sharded checkpoint"
            )
        self._restore_shards(folder)


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

    Every rank calls it alike, each with its own ``checkpoint_dir`` (node-local scratch;
    ranks may share one directory too: their file names differ). Every rank's ``report`` is
    called at every evaluation with the same metrics and, with a ``checkpoint_dir``, that
    rank's directory, once it holds this rank's files of the checkpoint (rank 0's: also
    ``.metadata`` and the trainer file). ``resume_from``: a folder holding every rank's files
    of one checkpoint (the merge of their directories), read by every rank.
    """
    if lr is not None:
        spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, lr=lr))
    trainer = ShardedTrainer(spec, shape, seed)
    if resume_from is not None:
        trainer.restore(resume_from)
    return trainer.run(report, checkpoint_dir)
