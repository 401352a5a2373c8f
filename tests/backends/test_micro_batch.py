"""Micro-batching and activation checkpointing: the same training as the whole batch at once.

A micro-batched trial accumulates the gradients of several forward/backward passes before its
one optimiser step, so on the same data and seed it must follow the plain trial's loss curve up
to float summation order; checkpointing recomputes the same forward. Neither changes which
trial it is (its identity) nor stops a checkpoint from resuming under another split.
"""

from __future__ import annotations

import dataclasses

import pytest

from dwtune.backends.pytorch import train as train_module
from dwtune.backends.pytorch.train import train_model
from dwtune.core import vocabulary
from dwtune.core.budget import ModelShape
from dwtune.core.errors import InputError
from dwtune.core.records import trial_identity
from dwtune.core.spec import spec_from_dict
from tests.helpers.specs import unit_spec

SHAPE = ModelShape(depth=2, width=16, heads=2, vocab_size=96, seq_len=16)
BATCH = 6
RTOL = 1e-5  # float32 summation order over 30 AdamW steps; another seed: ~1e-3 apart


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("token-cache"))


def make_spec(cache_dir: str, **train):
    return unit_spec(
        cache_dir,
        depth=2,
        budget=6e3,
        **{"steps": 30, "batch_size": BATCH, "device": "cpu", **train},
    )


def curve(spec, seed: int = 0, **kwargs) -> list[tuple[float, float, float]]:
    reports: list[dict] = []
    train_model(spec, SHAPE, seed, lambda m, _c: reports.append(m), **kwargs)
    keys = (vocabulary.TRAIN_LOSS, vocabulary.VAL_LOSS, vocabulary.GRAD_NORM)
    return [tuple(r[k] for k in keys) for r in reports]


@pytest.fixture(scope="module")
def plain(cache_dir) -> list[tuple[float, float, float]]:
    return curve(make_spec(cache_dir))


def count_passes(monkeypatch) -> list[int]:
    """Sequences in every forward pass the trainer's step makes."""
    seen: list[int] = []
    real = train_module.lm_loss

    def counting(model, inputs, targets):
        seen.append(inputs.shape[0])
        return real(model, inputs, targets)

    monkeypatch.setattr(train_module, "lm_loss", counting)
    return seen


@pytest.mark.parametrize(
    ("micro", "checkpointing", "passes"),
    [(2, "false", [2, 2, 2]), (4, "false", [4, 2]), (3, "true", [3, 3])],
    ids=["2x3", "4+2", "3x2+ckpt"],
)
def test_a_micro_batched_trial_follows_the_plain_loss_curve(
    cache_dir, plain, monkeypatch, micro, checkpointing, passes
):
    spec = make_spec(cache_dir, micro_batch_size=micro, activation_checkpointing=checkpointing)
    seen = count_passes(monkeypatch)
    split = curve(spec)
    assert seen == passes * 30  # every step ran as these passes, none as the whole batch
    assert len(split) == len(plain) == 3
    for got, want in zip(split, plain, strict=True):
        assert got == pytest.approx(want, rel=RTOL)


def test_another_seed_is_far_outside_the_tolerance(cache_dir, plain):
    other = curve(make_spec(cache_dir), seed=1)
    assert other[-1][1] != pytest.approx(plain[-1][1], rel=10 * RTOL)


def test_checkpointing_recomputes_each_block_in_backward(cache_dir, monkeypatch):
    from dwtune.backends.pytorch import model as model_module

    calls: list[bool] = []
    real = model_module.checkpoint
    monkeypatch.setattr(
        model_module, "checkpoint", lambda *a, **k: calls.append(True) or real(*a, **k)
    )
    curve(make_spec(cache_dir, steps=2, eval_every=2, activation_checkpointing="true"))
    assert len(calls) == 2 * SHAPE.depth  # per step and block; evaluation keeps no graph
    calls.clear()
    curve(make_spec(cache_dir, steps=2, eval_every=2))
    assert calls == []  # auto on CPU: memory is not limited, nothing is recomputed


def test_the_split_is_not_part_of_the_trial_identity(cache_dir):
    plain = make_spec(cache_dir)
    split = make_spec(cache_dir, micro_batch_size=2, activation_checkpointing="true")
    assert trial_identity(plain, SHAPE, 0) == trial_identity(split, SHAPE, 0)
    longer = dataclasses.replace(plain, train=dataclasses.replace(plain.train, steps=31))
    assert trial_identity(longer, SHAPE, 0) != trial_identity(plain, SHAPE, 0)


def test_a_checkpoint_resumes_under_another_split(cache_dir, tmp_path, plain):
    class Stop(Exception):
        pass

    def stop_at_10(metrics, _checkpoint):
        if metrics[vocabulary.STEP] == 10:
            raise Stop

    first = make_spec(cache_dir)
    with pytest.raises(Stop):
        train_model(first, SHAPE, 0, stop_at_10, checkpoint_dir=str(tmp_path))
    resumed = curve(make_spec(cache_dir, micro_batch_size=2), resume_from=str(tmp_path))
    for got, want in zip(resumed, plain[1:], strict=True):
        assert got == pytest.approx(want, rel=RTOL)


def test_a_micro_batch_above_the_batch_is_refused(cache_dir):
    with pytest.raises(InputError, match=r"train.micro_batch_size: got 7; expected at most"):
        make_spec(cache_dir, micro_batch_size=7)


H100_REPORTED = 85_520_809_984  # total_memory of an H100 80GB HBM3: 81,559 MiB, 79.65 GiB


def test_on_a_gpu_the_trainer_splits_as_the_plan_shows(cache_dir, monkeypatch):
    """On an H100 (its reported memory, not 80 GiB) the trainer's split of a trial is the one
    `dwtune plan --device h100` shows, also under paper.yaml's gpu_memory_gb: 80 (a cap above
    what the device has); this cell splits differently at 80 GiB."""
    from types import SimpleNamespace

    import torch

    from dwtune.backends.pytorch.train import Runtime, choose_split
    from dwtune.core.cost import device_memory
    from dwtune.core.sharding import worker_split
    from dwtune.study.planning import cell_split, gpu_memory_bytes

    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda _d: SimpleNamespace(total_memory=H100_REPORTED)
    )
    assert device_memory("h100") == H100_REPORTED
    raw = {
        "name": "gpu",
        "data": {"cache_dir": cache_dir, "tokenizer": "bpe", "vocab_size": 2000},
        "model": {"width_multiple": 16},
        "space": {"depths": [48], "budgets": [4e9]},
        "train": {"steps": 10, "batch_size": 512},
        "resources": {"gpu": 1, "gpu_memory_gb": 80},
    }
    spec = spec_from_dict(raw)
    cell = spec.grid()[0]
    gpu = Runtime(torch.device("cuda"), compile=False, threads=1)
    trainer_split = choose_split(spec, cell.shape, gpu)
    assert gpu_memory_bytes(spec, "h100") == H100_REPORTED
    assert trainer_split == cell_split(spec, cell, gpu_memory_bytes(spec, "h100")).split
    assert trainer_split.accumulation > 1 and trainer_split.fits
    nominal = worker_split(spec, cell.shape, 1, 0.9 * 80 * 2**30)
    assert nominal.micro_batch != trainer_split.micro_batch  # 80 GiB would plan another split
    cpu = Runtime(torch.device("cpu"), compile=False, threads=1)
    assert choose_split(spec, cell.shape, cpu).accumulation == 1  # CPU: no memory limit
