"""Fused seeds: k seeds trained as one model follow, seed by seed, their trainings alone."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from dwtune.backends.data import train_batch
from dwtune.backends.pytorch.fused import (
    FusedTrainingLoop,
    build_fused_training,
    clip_per_seed,
    train_fused,
)
from dwtune.backends.pytorch.model import build_fused_model, build_model
from dwtune.backends.pytorch.train import (
    CHECKPOINT_FILE,
    Runtime,
    build_training,
    to_device,
    train_model,
)
from dwtune.core import vocabulary
from dwtune.core.budget import ModelShape
from dwtune.core.errors import InputError
from dwtune.core.memory import micro_batches
from dwtune.core.parametrization import parametrization_for
from dwtune.core.spec import TrainConfig
from tests.helpers.specs import unit_spec

SHAPE = ModelShape(depth=2, width=16, heads=2, vocab_size=96, seq_len=16)
SEEDS = (0, 1, 2)
TOLERANCE = 1e-4  # relative, per step (fp32 on CPU: batched against plain matmuls)
CPU = Runtime(torch.device("cpu"), compile=False, threads=1)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("token-cache"))


def make_spec(cache_dir: str, **train):
    return unit_spec(cache_dir, depth=2, budget=1e4, **{"steps": 60, **train})


def relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def step_losses(shape, cfg, seeds, steps, tokens, micro=None, param=None) -> np.ndarray:
    """(steps, S) per-step losses of ``seeds`` fused (one step) or alone (a step each)."""
    split = micro_batches(shape, cfg.batch_size, 4, None, micro, False) if micro else None
    if len(seeds) > 1:
        fused = build_fused_training(shape, cfg, CPU, seeds, param, split=split)
        run = [lambda windows, _s: fused(*to_device(windows, CPU.device))[0]]
    else:
        alone = build_training(shape, cfg, CPU, seeds[0], param, split=split)
        run = [lambda windows, _s: alone(*to_device(windows[0], CPU.device))[0][None]]
    out = []
    for step in range(steps):
        lr = cfg.lr_at(step, steps)
        for group in (fused if len(seeds) > 1 else alone).optimizer.param_groups:
            group["lr"] = lr * group["lr_scale"]
        windows = np.stack(
            [train_batch(tokens, s, step, cfg.batch_size, shape.seq_len) for s in seeds]
        )
        out.append(run[0](windows, step).detach().numpy())
    return np.array(out)


def learnable_tokens(vocab: int, count: int = 20_000) -> np.ndarray:
    """Each token a fixed function of the previous one, 1 in 8 replaced at random: a stream a
    net learns. On uniform noise a net memorises its batches, a chaotic path on which float
    rounding (1e-7) grows to 1e-3 within 300 steps, fused or not."""
    rng = np.random.default_rng(7)
    tokens = np.zeros(count, dtype=np.int64)
    for i in range(1, count):
        tokens[i] = (tokens[i - 1] * 5 + 3) % vocab
    noise = rng.random(count) < 0.125
    tokens[noise] = rng.integers(0, vocab, int(noise.sum()))
    return tokens


def largest_difference(shape, cfg, steps, micro=None, param=None) -> float:
    tokens = learnable_tokens(shape.vocab_size)
    fused = step_losses(shape, cfg, SEEDS, steps, tokens, micro, param)
    alone = np.concatenate(
        [step_losses(shape, cfg, (seed,), steps, tokens, micro, param) for seed in SEEDS],
        axis=1,
    )
    assert fused.shape == alone.shape == (steps, len(SEEDS))
    return float(np.max(np.abs(fused - alone) / np.abs(alone)))


def test_fused_seeds_follow_their_trainings_alone_step_by_step():
    # clipping at 0.5 binds on most steps; weight decay on: both must act per seed
    cfg = TrainConfig(steps=300, batch_size=4, lr=3e-3, warmup_steps=10, grad_clip=0.5)
    difference = largest_difference(SHAPE, cfg, 300)
    print(f"fused vs alone, 300 steps, 3 seeds: largest relative loss difference {difference:.2e}")
    assert difference < TOLERANCE


@pytest.mark.parametrize(
    "shape",
    [
        dataclasses.replace(SHAPE, bias=True, tied_embeddings=False),
        dataclasses.replace(SHAPE, depth=1, heads=4),
    ],
)
def test_untied_biased_and_other_layouts_fuse_exactly(shape):
    cfg = TrainConfig(steps=40, batch_size=4, lr=3e-3, warmup_steps=5)
    assert largest_difference(shape, cfg, 40) < TOLERANCE


@pytest.mark.parametrize("name", ["mup", "completep"])
def test_mup_and_completep_groups_fuse_exactly(name):
    # their hidden matrices are an optimizer group of their own (rate, decay and eps scaled)
    param = parametrization_for(
        name, width=16, depth=2, heads=2, base_width=8, base_depth=1, head_dim_fixed=False
    )
    cfg = TrainConfig(steps=40, batch_size=4, lr=3e-3, warmup_steps=5)
    assert largest_difference(SHAPE, cfg, 40, param=param) < TOLERANCE


def test_micro_batched_fused_seeds_follow_their_trainings_alone():
    cfg = TrainConfig(steps=40, batch_size=6, lr=3e-3, warmup_steps=5)
    assert largest_difference(SHAPE, cfg, 40, micro=4) < TOLERANCE  # passes of 4 and 2


def test_each_seed_starts_from_its_own_initialisation():
    fused = build_fused_model(SHAPE, [3, 5])
    for index, seed in enumerate((3, 5)):
        torch.manual_seed(seed)
        alone = build_model(SHAPE)
        assert torch.equal(fused.blocks[1].mlp.fc.weight[index], alone.blocks[1].mlp.fc.weight)
        assert torch.equal(fused.token_embedding[index], alone.token_embedding.weight)
    assert not torch.equal(fused.token_embedding[0], fused.token_embedding[1])


def test_clipping_scales_each_seed_by_its_own_norm():
    grad = torch.stack([torch.full((2, 2), 3.0), torch.full((2, 2), 0.1)])  # norms 6, 0.2
    param = torch.zeros_like(grad, requires_grad=True)
    param.grad = grad.clone()
    norms = clip_per_seed([param], max_norm=1.0)
    assert norms.tolist() == pytest.approx([6.0, 0.2])
    assert param.grad[0].norm().item() == pytest.approx(1.0, rel=1e-5)  # clipped
    assert torch.equal(param.grad[1], grad[1])  # under the bound: untouched


def by_seed(cache_dir, spec, seeds=SEEDS, **kwargs) -> tuple[dict, dict]:
    reports: dict[int, list[dict]] = {seed: [] for seed in seeds}

    def report(batch: dict, _checkpoint) -> None:
        for seed, metrics in batch.items():
            reports[seed].append(metrics)

    finals = train_fused(spec, SHAPE, seeds, report, **kwargs)
    return reports, finals


def alone(spec, seed) -> list[dict]:
    reports: list[dict] = []
    train_model(spec, SHAPE, seed, lambda m, _c: reports.append(m))
    return reports


def assert_same_records(fused: list[dict], own: list[dict], values: bool = True) -> None:
    assert [m[vocabulary.STEP] for m in fused] == [m[vocabulary.STEP] for m in own]
    assert [m.get(vocabulary.STATUS) for m in fused] == [m.get(vocabulary.STATUS) for m in own]
    if not values:
        return
    for a, b in zip(fused, own, strict=True):
        for key in (vocabulary.TRAIN_LOSS, vocabulary.VAL_LOSS, vocabulary.GRAD_NORM):
            assert relative(a[key], b[key]) < TOLERANCE, key
    assert np.allclose(
        fused[-1][vocabulary.VAL_WINDOWS], own[-1][vocabulary.VAL_WINDOWS], rtol=TOLERANCE
    )


def test_each_fused_seed_reports_what_it_reports_alone(cache_dir):
    # patience 10 at eval_every 10: a seed whose loss rises once ends there, as it would alone
    spec = make_spec(cache_dir, steps=80, patience=10)
    reports, finals = by_seed(cache_dir, spec)
    for seed in SEEDS:
        assert_same_records(reports[seed], alone(spec, seed))
        assert finals[seed] == reports[seed][-1]


def test_a_diverging_seed_ends_alone_and_the_others_train_on(cache_dir):
    spec = make_spec(cache_dir, steps=30)
    loop = FusedTrainingLoop(spec, SHAPE, SEEDS)
    with torch.no_grad():
        loop.step_fn.model.final_norm.weight[1] = math.nan  # seed 1's slice only
    reports: dict[int, list[dict]] = {seed: [] for seed in SEEDS}
    loop.run_seeds(lambda batch, _c: [reports[s].append(m) for s, m in batch.items()])
    assert [m[vocabulary.STEP] for m in reports[1]] == [1]  # off schedule, at once
    assert reports[1][-1][vocabulary.STATUS] == vocabulary.STATUS_DIVERGED
    for seed in (0, 2):
        assert_same_records(reports[seed], alone(spec, seed))


def test_an_absurd_rate_ends_every_fused_seed_as_diverged(cache_dir):
    spec = make_spec(cache_dir, lr=50.0, warmup_steps=0, schedule="constant", steps=100)
    reports, _ = by_seed(cache_dir, spec)
    for seed in SEEDS:
        # the path is chaotic before it diverges: compare where and how each ends
        assert_same_records(reports[seed], alone(spec, seed), values=False)
        assert reports[seed][-1][vocabulary.STATUS] == vocabulary.STATUS_DIVERGED


def test_a_resumed_fused_training_ends_where_an_uninterrupted_one_does(cache_dir, tmp_path):
    spec = make_spec(cache_dir)
    whole, _ = by_seed(cache_dir, spec)

    class Stop(Exception):
        pass

    def stop_at_20(batch: dict, _checkpoint) -> None:
        if next(iter(batch.values()))[vocabulary.STEP] == 20:
            raise Stop

    with pytest.raises(Stop):
        train_fused(spec, SHAPE, SEEDS, stop_at_20, checkpoint_dir=str(tmp_path))
    assert (tmp_path / CHECKPOINT_FILE).is_file()
    tail, _ = by_seed(cache_dir, spec, resume_from=str(tmp_path))
    for seed in SEEDS:
        assert [m[vocabulary.STEP] for m in tail[seed]] == [30, 40, 50, 60]
        for a, b in zip(tail[seed], whole[seed][2:], strict=True):
            assert a[vocabulary.VAL_LOSS] == b[vocabulary.VAL_LOSS]  # same process: exact


def test_a_fused_checkpoint_resumes_only_the_same_seeds(cache_dir, tmp_path):
    spec = make_spec(cache_dir, steps=10)
    by_seed(cache_dir, spec, checkpoint_dir=str(tmp_path))
    with pytest.raises(InputError, match="holds seeds"):
        train_fused(spec, SHAPE, (0, 1), lambda *_: None, resume_from=str(tmp_path))
    with pytest.raises(InputError, match="holds seeds"):
        train_model(spec, SHAPE, 0, lambda *_: None, resume_from=str(tmp_path))


def test_a_fused_trial_splits_by_the_memory_of_all_its_seeds(cache_dir):
    one = micro_batches(SHAPE, 64, 2, None)
    limit = one.estimate.total * 1.5  # one seed fits whole; four fused do not
    assert micro_batches(SHAPE, 64, 2, limit).accumulation == 1
    assert micro_batches(SHAPE, 64, 2, limit, seeds=4).accumulation > 1
    loop = FusedTrainingLoop(make_spec(cache_dir), SHAPE, (0, 1))
    assert loop.split.estimate.total == 2 * micro_batches(SHAPE, 4, 4, None).estimate.total


def test_seeds_must_be_distinct(cache_dir):
    with pytest.raises(InputError, match="distinct"):
        FusedTrainingLoop(make_spec(cache_dir), SHAPE, (1, 1))


def test_finite_reports_only(cache_dir):
    spec = make_spec(cache_dir, steps=10)
    reports, finals = by_seed(cache_dir, spec, seeds=(4, 5))
    assert all(math.isfinite(m[vocabulary.VAL_LOSS]) for m in reports[4])
    assert finals[5][vocabulary.STATUS] == vocabulary.STATUS_FINISHED
