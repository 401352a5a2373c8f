"""The simulated lr penalty under the parametrisations, and each trial's own rate."""

from __future__ import annotations

import math

import pytest

from dwtune.backends.simulated import final_loss, lr_optimum, mean_loss
from dwtune.core.records import make_request, request_spec
from dwtune.core.spec import spec_from_dict
from tests.helpers.specs import small_simulated

PENALTY = {"lr_penalty": 0.02, "surface": "lr_mistuned", "lr_opt": 3e-3, "lr_base_width": 256}


def _spec(**model):
    return spec_from_dict(small_simulated(simulated=PENALTY, model=model))


def test_under_sp_the_shared_rate_is_mistuned_away_from_the_base_width():
    spec = _spec()
    at_base = mean_loss(spec, 6, 256, 3e-3) - mean_loss(spec, 6, 256, None)
    wide = mean_loss(spec, 6, 1024, 3e-3) - mean_loss(spec, 6, 1024, None)
    assert at_base == pytest.approx(0.0, abs=1e-12)
    assert wide == pytest.approx(0.02 * math.log(4) ** 2)


def test_under_mup_and_completep_the_best_rate_does_not_move_with_width():
    for model in (
        {"parametrization": "mup", "base_width": 64},
        {
            "parametrization": "completep",
            "base_width": 64,
            "base_depth": 6,
        },
    ):
        spec = _spec(**model)
        for width in (64, 1024, 4096):
            assert mean_loss(spec, 6, width, 3e-3) == pytest.approx(mean_loss(spec, 6, width, None))


def test_the_backend_trains_with_the_trial_rate_not_the_spec_rate():
    spec = _spec()
    cell = spec.grid()[-1]
    best = lr_optimum(spec.simulated, cell.shape.width)
    own = make_request(spec, cell, 0, "grid", lr=best, lr_source="search")
    shared = make_request(spec, cell, 0, "grid")
    tuned = final_loss(request_spec(spec, own), cell.shape, 0)
    mistuned = final_loss(request_spec(spec, shared), cell.shape, 0)
    expected = 0.02 * math.log(spec.train.lr / best) ** 2
    assert mistuned - tuned == pytest.approx(expected, rel=1e-9)
