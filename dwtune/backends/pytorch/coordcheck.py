"""The coordinate check (torch work): activation RMS per layer after a few training steps.

For each parametrisation, depth and width the model is built from the spec (``shape_at``),
trained ``steps`` AdamW steps at a constant rate on the spec's corpus (the batches
``train_batch`` gives seed 0, the same at every width), then run once on a fixed held-out
batch with forward hooks recording the root-mean-square of the embedding output, of each
block's output (the residual stream) and of the logits. Under standard parametrisation the
updates of the hidden matrices grow with width at a fixed Adam rate, so the RMS after training
grows with width; μP is built to keep it flat (Yang et al. 2022, the "coord check").
"""

from __future__ import annotations

import dataclasses

import torch

from dwtune.backends.data import eval_batches, prepare_corpus, train_batch
from dwtune.backends.pytorch.model import GPT, build_model
from dwtune.backends.pytorch.train import LR_SCALE, configure_threads, make_optimizer, to_device
from dwtune.core.parametrization import for_shape
from dwtune.core.spec import ExperimentSpec

EMBEDDING = "embedding"
LOGITS = "logits"


def layer_names(depth: int) -> list[str]:
    return [EMBEDDING, *(f"block_{i + 1}" for i in range(depth)), LOGITS]


def _rms(tensor: torch.Tensor) -> float:
    return float(tensor.detach().float().pow(2).mean().sqrt())


def _train(model: GPT, spec: ExperimentSpec, tokens, steps: int, lr: float) -> None:
    cfg = dataclasses.replace(spec.train, lr=lr)
    optimizer = make_optimizer(model, cfg)
    for group in optimizer.param_groups:  # constant rate: no warm-up in a few steps
        group["lr"] = lr * group.get(LR_SCALE, 1.0)
    for step in range(steps):
        windows = train_batch(tokens, 0, step, cfg.batch_size, model.shape.seq_len)
        inputs, targets = to_device(windows, torch.device("cpu"))
        optimizer.zero_grad(set_to_none=True)
        model.loss(inputs, targets).backward()
        optimizer.step()


@torch.no_grad()
def _activation_rms(model: GPT, inputs: torch.Tensor) -> dict[str, float]:
    values: dict[str, float] = {}
    hooks = [
        block.register_forward_hook(
            lambda _m, _i, out, name=f"block_{i + 1}": values.__setitem__(name, _rms(out))
        )
        for i, block in enumerate(model.blocks)
    ]
    t = inputs.shape[1]
    values[EMBEDDING] = _rms(model.token_embedding(inputs) + model.position_embedding.weight[:t])
    try:
        values[LOGITS] = _rms(model(inputs))
    finally:
        for hook in hooks:
            hook.remove()
    return values


def coordinate_check(
    spec: ExperimentSpec,
    parametrizations: list[str],
    widths: list[int],
    depths: list[int],
    steps: int,
    lr: float,
) -> dict[str, dict[int, dict[int, dict[str, float]]]]:
    """RMS per layer: parametrisation -> depth -> width -> layer -> RMS after ``steps``."""
    configure_threads()
    corpus = prepare_corpus(spec.data)
    tokens = corpus.train()
    probe = eval_batches(corpus.val(), 1, spec.train.batch_size, spec.data.seq_len)[0]
    inputs, _ = to_device(probe, torch.device("cpu"))
    results: dict = {}
    for name in parametrizations:
        model_cfg = dataclasses.replace(
            spec.model,
            parametrization=name,
            base_width=spec.model.base_width or min(widths),
            base_depth=spec.model.base_depth or min(depths),
        )
        for depth in depths:
            for width in widths:
                shape = spec.shape_at(depth, width)
                torch.manual_seed(0)  # the same draw at every width and parametrisation
                model = build_model(shape, for_shape(model_cfg, shape))
                _train(model, spec, tokens, steps, lr)
                rms = _activation_rms(model.eval(), inputs)
                results.setdefault(name, {}).setdefault(depth, {})[width] = rms
    return results
