"""Pure scale, cost and memory math."""

from __future__ import annotations

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


def test_new_data_fields_at_their_defaults_keep_recorded_trial_identities():
    """2c7eb6be9e631038 is what dwtune recorded for this trial before bpe_sample_mb and
    max_epochs existed: experiments from then must resume without retraining."""
    import dataclasses
    from pathlib import Path

    from dwtune.core.records import trial_identity
    from dwtune.core.spec import load_spec

    spec = load_spec(Path(__file__).resolve().parents[2] / "search_spaces" / "quickstart.yaml")
    shape = spec.grid()[0].shape
    assert trial_identity(spec, shape, 0) == "2c7eb6be9e631038"
    guarded = dataclasses.replace(spec, data=dataclasses.replace(spec.data, max_epochs=100.0))
    assert trial_identity(guarded, shape, 0) == "2c7eb6be9e631038"  # a guard, not a result
    sampled = dataclasses.replace(spec, data=dataclasses.replace(spec.data, bpe_sample_mb=5.0))
    assert trial_identity(sampled, shape, 0) != "2c7eb6be9e631038"
