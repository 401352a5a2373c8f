"""Spec fields of issue 12: lr search, parametrisation, head_dim, compare, tokens_per_param."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from dwtune.cli import main
from dwtune.core.budget import flops_per_token
from dwtune.core.errors import InputError
from dwtune.core.records import grid_requests, request_spec, trial_identity
from dwtune.core.spec import spec_from_dict
from tests.helpers.specs import SMALL_SIMULATED

SEARCH = {"search": "log", "min": 1e-4, "max": 3e-2, "trials": 4, "fidelity": 0.25}


def _raw(**sections) -> dict:
    raw = copy.deepcopy(SMALL_SIMULATED)
    for key, value in sections.items():
        raw.setdefault(key, {}).update(value)
    return raw


BAD = [
    ({"train": {"lr": {**SEARCH, "min": 3e-2, "max": 1e-4}}}, "train.lr: got min 0.03 >= max"),
    ({"train": {"lr": {**SEARCH, "trials": 0}}}, "train.lr.trials: got 0"),
    ({"train": {"lr": {**SEARCH, "fidelity": 0.0}}}, "train.lr.fidelity: got 0.0"),
    ({"train": {"lr": {**SEARCH, "fidelity": 1.5}}}, "train.lr.fidelity: got 1.5"),
    ({"model": {"parametrization": "ntk"}}, "model.parametrization: got 'ntk'"),
    ({"model": {"parametrization": "mup", "base_width": 100}}, "model.base_width: got 100"),
    ({"model": {"parametrization": "mup"}}, "model.base_width: missing"),
    ({"model": {"parametrization": "completep", "base_width": 64}}, "model.base_depth: got None"),
    ({"model": {"heads": 2, "head_dim": 32}}, "model: got both heads (2) and head_dim (32)"),
    ({"space": {"compare": "time"}}, "space.compare: got 'time'"),
]


@pytest.mark.parametrize("sections,message", BAD, ids=[m for _, m in BAD])
def test_bad_input_is_one_input_error_naming_the_field(sections, message):
    with pytest.raises(InputError) as error:
        spec_from_dict(_raw(**sections))
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("sections,message", BAD[:6], ids=[m for _, m in BAD[:6]])
def test_bad_input_exits_2_with_one_line(sections, message, write_spec, capsys):
    raw = _raw(**sections)
    assert main(["plan", str(write_spec(raw))]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_new_fields_at_their_defaults_leave_trial_identities_unchanged():
    spec = spec_from_dict(_raw())
    cell = spec.grid()[0]
    explicit = dataclasses.replace(
        spec, model=dataclasses.replace(spec.model, parametrization="sp")
    )
    assert trial_identity(explicit, cell.shape, 0) == trial_identity(spec, cell.shape, 0)
    # a fixed identity computed before issue 12 (same payload, fields of today's defaults)
    assert "tokens_per_param" not in spec.train.identity()
    assert "lr_search" not in spec.train.identity()


def test_the_parametrization_and_the_trial_rate_enter_the_identity():
    spec = spec_from_dict(_raw())
    mup = spec_from_dict(_raw(model={"parametrization": "mup", "base_width": 64}))
    shape = spec.grid()[0].shape
    assert trial_identity(mup, shape, 0) != trial_identity(spec, shape, 0)
    assert trial_identity(spec, shape, 0, lr=1e-3) != trial_identity(spec, shape, 0)
    full = trial_identity(spec, shape, 0, lr=1e-3)
    assert trial_identity(spec, shape, 0, lr=1e-3, search_steps=400) != full


def test_a_searched_rate_replaces_the_search_in_the_trial_spec():
    spec = spec_from_dict(_raw(train={"lr": SEARCH}))
    assert spec.train.lr == pytest.approx((1e-4 * 3e-2) ** 0.5)
    cell = spec.grid()[0]
    rates = {(cell.depth, cell.shape.width): (2e-3, "search")}
    request = next(r for r in grid_requests(spec, rates) if r.cell == cell)
    trained = request_spec(spec, request)
    assert trained.train.lr == 2e-3 and trained.train.lr_search is None
    assert request.lr_source == "search"


def test_head_dim_fixes_the_head_width_and_heads_follow_the_width():
    raw = _raw(model={"head_dim": 16})
    raw["model"].pop("heads")
    spec = spec_from_dict(raw)
    for cell in spec.grid():
        assert cell.shape.width % 16 == 0 and cell.shape.heads == cell.shape.width // 16
    with pytest.raises(InputError, match=r"model\.head_dim: 16 does not divide width 40"):
        spec.shape_at(2, 40)


def test_equal_flops_cells_spend_the_same_training_compute():
    spec = spec_from_dict(_raw(space={"compare": "flops", "budgets": [1e14, 1e15]}))
    tokens = spec.train.steps * spec.train.batch_size * spec.data.seq_len
    for cell in spec.grid():
        spent = flops_per_token(cell.shape) * tokens
        assert spent == pytest.approx(cell.budget, rel=0.25)


def test_tokens_per_param_trains_in_proportion_to_the_size():
    spec = spec_from_dict(_raw(train={"steps": None, "tokens_per_param": 20}))
    small, large = spec.grid()[0], spec.grid()[1]
    steps = [request_spec(spec, r).train.total_steps(128) for r in grid_requests(spec)[:2]]
    ratio = large.params_non_embedding / small.params_non_embedding
    assert spec.training_tokens(large.shape) / spec.training_tokens(small.shape) == pytest.approx(
        ratio
    )
    assert steps[0] >= 1
