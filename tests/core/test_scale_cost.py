"""Pure scale, cost and memory math."""

from __future__ import annotations

import math

import pytest

from dwtune.core import cost, memory, scale
from dwtune.core.budget import ModelShape, flops_per_token


def test_bytes_per_token_interpolates_between_the_measured_points():
    assert scale.bytes_per_token("char", 128) == 1.0
    assert scale.bytes_per_token("bpe", 2000) == pytest.approx(2.76)
    assert scale.bytes_per_token("bpe", 256) == pytest.approx(1.0)
    assert 2.76 < scale.bytes_per_token("bpe", 8000) < 4.0
    assert scale.bytes_per_token("bpe", 10**6) == pytest.approx(4.0)


def test_makespan_schedules_longest_first_and_packing_slows_each_trial():
    assert cost.makespan([4, 3, 3, 2], gpus=2) == 6
    assert cost.makespan([1, 1, 1, 1], gpus=1, per_gpu=4) == 4  # shared GPU: no speed-up
    assert cost.makespan([], gpus=3) == 0


def test_a_sharded_trial_holds_all_its_gpus_until_it_ends():
    # 4 GPU-hours over 2 GPUs: 2 hours on both; then one trial on each
    assert cost.makespan([4, 2, 2], gpus=2, spans=[2, 1, 1]) == 4
    # it waits for 3 free GPUs: the 1-hour trial runs after it, not beside it
    assert cost.makespan([6, 1], gpus=3, spans=[3, 1]) == 3
    # it starts when the last of its GPUs frees: 2 h of a one-GPU trial, then 4 / 2 h
    assert cost.makespan([2, 4], gpus=2, spans=[1, 2]) == 4  # longest (4) first, then 2
    assert cost.makespan([5, 4], gpus=2, spans=[1, 2]) == 7  # 5 h alone, then 2 h on both
    # wider than the cluster: counted on all of it
    assert cost.makespan([6], gpus=2, spans=[8]) == 3
    stage = cost.stage_cost("grid", [[7.2e15, 3.6e15]], 1e12, 0.5, 2, 1, spans=[[2, 1]])
    assert stage.gpu_hours == pytest.approx(6.0)  # GPU-hours do not depend on the span
    assert stage.wall_hours == pytest.approx(2.0 + 2.0)


def test_stage_cost_adds_rounds_one_after_another():
    shape = ModelShape(depth=2, width=64, heads=2, vocab_size=100, seq_len=16)
    flops = cost.trial_flops(shape, train_tokens=3e9, eval_tokens=3e8)
    assert flops == pytest.approx(flops_per_token(shape) * (3e9 + 1e8))
    stage = cost.stage_cost("refine", [[3.6e15, 3.6e15], [7.2e15]], 1e12, 0.5, gpus=2, per_gpu=1)
    assert stage.trainings == 3 and stage.gpu_hours == pytest.approx(8.0)
    assert stage.wall_hours == pytest.approx(2.0 + 4.0)


def test_a_trial_bigger_than_its_share_of_a_gpu_is_named():
    gib = 2**30
    assert memory.trials_per_gpu(9 * gib, 80 * gib) == 8
    assert memory.packing_problem(9 * gib, 0.125, 80 * gib, "trial X") is None
    problem = memory.packing_problem(20 * gib, 0.25, 80 * gib, "trial X")
    assert problem.startswith("resources.gpu: got 0.25; trial X needs about 20.0 GiB")
    assert problem.endswith("use resources.gpu >= 0.333333")
    assert memory.packing_problem(20 * gib, 0.0, 80 * gib, "trial X") is None


# search_spaces/quickstart.yaml as it was when 2c7eb6be9e631038 was recorded (the shipped file has
# changed since; the identity of this spec must not).
QUICKSTART_BEFORE_THESE_FIELDS = {
    "name": "quickstart",
    "trainer": "torch",
    "data": {"corpus": "shakespeare", "tokenizer": "char", "vocab_size": 128, "seq_len": 128},
    "model": {"heads": 2, "width_multiple": 2},
    "space": {"depths": [1, 2], "budgets": [1e5, 3e5, 1e6], "seeds": 1},
    "train": {
        "steps": 2000,
        "batch_size": 16,
        "lr": 3e-3,
        "warmup_steps": 100,
        "eval_every": 250,
        "eval_batches": 8,
    },
    "refine": {"pairs": [[1, 2]], "tolerance": 0.5, "seeds": 1, "max_seeds": 1, "max_rounds": 1},
    "fit": {"budgets": [1.75e11, 1e12]},
    "resources": {"cpu": 1},
}


def test_new_data_fields_at_their_defaults_keep_recorded_trial_identities():
    """2c7eb6be9e631038 is what dwtune recorded for this trial before bpe_sample_mb and
    max_epochs existed: experiments from then must resume without retraining."""
    import dataclasses

    from dwtune.core.records import trial_identity
    from dwtune.core.spec import spec_from_dict

    spec = spec_from_dict(QUICKSTART_BEFORE_THESE_FIELDS)
    shape = spec.grid()[0].shape
    assert trial_identity(spec, shape, 0) == "2c7eb6be9e631038"
    guarded = dataclasses.replace(spec, data=dataclasses.replace(spec.data, max_epochs=100.0))
    assert trial_identity(guarded, shape, 0) == "2c7eb6be9e631038"  # a guard, not a result
    sampled = dataclasses.replace(spec, data=dataclasses.replace(spec.data, bpe_sample_mb=5.0))
    assert trial_identity(sampled, shape, 0) != "2c7eb6be9e631038"


# --------------------------------------------------------------------------- micro-batches

WIDE = ModelShape(depth=24, width=2048, heads=2, vocab_size=2000, seq_len=128)


def test_micro_batches_take_the_fewest_passes_that_fit_and_even_them_out():
    gib = 2**30
    whole = memory.micro_batches(WIDE, 512, 2, None)
    assert (whole.micro_batch, whole.accumulation, whole.checkpointing) == (512, 1, False)
    assert whole.fits and whole.sizes() == [512]
    need = memory.trial_memory(WIDE, 512, 2).total
    budget = 40 * gib
    assert need > budget
    split = memory.micro_batches(WIDE, 512, 2, budget)
    assert split.fits and not split.checkpointing and split.accumulation > 1
    assert split.estimate.total <= budget
    assert sum(split.sizes()) == 512 and max(split.sizes()) == split.micro_batch
    # one pass fewer does not fit: no larger micro-batch would do
    fewer = -(-512 // (split.accumulation - 1))
    assert memory.trial_memory(WIDE, fewer, 2).total > budget
    assert memory.micro_batches(WIDE, 10, 2, None, micro_batch=4).sizes() == [4, 4, 2]


def test_checkpointing_only_where_no_micro_batch_fits_without_it():
    weights = memory.trial_memory(WIDE, 1, 2).weights_and_optimizer
    one_plain = memory.trial_memory(WIDE, 1, 2).total
    one_ckpt = memory.trial_memory(WIDE, 1, 2, checkpointing=True).total
    assert weights < one_ckpt < one_plain
    tight = (one_ckpt + one_plain) / 2
    split = memory.micro_batches(WIDE, 512, 2, tight)
    assert split.fits and split.checkpointing
    assert not memory.micro_batches(WIDE, 512, 2, tight, checkpointing=False).fits
    roomy = memory.micro_batches(WIDE, 512, 2, 2 * one_plain)
    assert roomy.fits and not roomy.checkpointing
    hopeless = memory.micro_batches(WIDE, 512, 2, weights * 0.9)
    assert not hopeless.fits and hopeless.micro_batch == 1 and hopeless.accumulation == 512
    assert hopeless.label() == "1x512+ckpt"


def test_a_checkpointed_trial_costs_a_recomputed_forward():
    plain = cost.trial_flops(WIDE, train_tokens=1e9, eval_tokens=0)
    assert cost.trial_flops(WIDE, 1e9, 0, recompute=True) == pytest.approx(plain * 4 / 3)


def test_a_trials_mfu_is_its_reports_weighted_by_the_time_they_cover():
    from dwtune.core import vocabulary
    from dwtune.core.records import mean_mfu

    def report(step: int, mfu: float, step_time: float) -> dict:
        return {vocabulary.STEP: step, vocabulary.MFU: mfu, vocabulary.STEP_TIME_S: step_time}

    # 10 steps of 1 s at 0.2, then 10 steps of 3 s at 0.4: (2 + 12) / 40
    curve = [report(10, 0.2, 1.0), report(20, 0.4, 3.0)]
    assert mean_mfu(curve) == pytest.approx(14 / 40)
    # a short last interval counts for its few steps only
    assert mean_mfu([report(10, 0.2, 1.0), report(11, 0.8, 1.0)]) == pytest.approx(2.8 / 11)
    assert math.isnan(mean_mfu([report(10, math.nan, 1.0)]))  # no device peak: simulated
    assert math.isnan(mean_mfu([]))
