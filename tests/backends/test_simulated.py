"""The simulated backend: planted sign changes, seed noise, the curve it reports, resume."""

import dataclasses
import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from dwtune.backends.simulated import (
    final_loss,
    mean_loss,
    paired_noise_sd,
    planted_chain,
    planted_transition,
    planted_width,
    simulate_training,
)
from dwtune.backends.trial import run_trial_inprocess
from dwtune.core import vocabulary
from dwtune.core.errors import InputError
from dwtune.core.records import grid_requests, trial_identity
from dwtune.core.spec import load_spec, spec_from_dict

SIMULATED_YAML = Path(__file__).resolve().parents[2] / "search_spaces" / "simulated.yaml"


@pytest.fixture(scope="module")
def spec():
    return load_spec(SIMULATED_YAML)


def loss_at(spec, depth: int, n_params: float) -> float:
    """Noise-free loss of ``depth`` at exactly ``n_params`` (a width that need not be legal)."""
    return mean_loss(spec, depth, math.sqrt(n_params / (12 * depth)))


def test_every_configured_pair_changes_sign_exactly_at_its_planted_size(spec):
    for shallow, deep in spec.refine.pairs:
        n_star = planted_transition(spec.simulated, deep)
        assert math.isclose(math.sqrt(n_star / (12 * deep)), planted_width(spec.simulated, deep))
        below, at, above = (
            loss_at(spec, deep, n * f) - loss_at(spec, shallow, n * f)
            for n, f in ((n_star, 0.99), (n_star, 1.0), (n_star, 1.01))
        )
        assert below > 0 > above
        assert abs(at) < 1e-12


def test_a_pair_that_is_not_configured_changes_sign_between_its_links(spec):
    sizes = np.geomspace(
        planted_transition(spec.simulated, 12) / 3, planted_transition(spec.simulated, 18) * 3, 400
    )
    delta = np.array([loss_at(spec, 18, n) - loss_at(spec, 6, n) for n in sizes])
    crossing = sizes[np.flatnonzero(delta < 0)[0]]
    assert delta[0] > 0
    low, high = (planted_transition(spec.simulated, d) for d in (12, 18))
    assert low < crossing < high


def test_planted_chain_follows_the_pairs_down():
    assert planted_chain([(6, 12), (12, 18)], 18) == (18, 12, 6)
    assert planted_chain([(6, 12), (12, 18)], 24) == (24,)


def test_noise_is_reproducible_with_the_configured_sd_and_pairing(spec):
    cells = spec.cell(12, 1e7).shape, spec.cell(18, 1e7).shape
    first = np.array([[final_loss(spec, shape, seed) for shape in cells] for seed in range(600)])
    again = np.array([[final_loss(spec, shape, seed) for shape in cells] for seed in range(600)])
    assert np.array_equal(first, again)
    noise = spec.simulated.noise
    assert first[:, 0].std() == pytest.approx(noise, rel=0.12)
    paired = first[:, 1] - first[:, 0]
    assert paired.std() == pytest.approx(paired_noise_sd(spec.simulated), rel=0.12)
    assert paired_noise_sd(spec.simulated) == pytest.approx(noise * math.sqrt(2 * 0.5))


def test_zero_noise_gives_the_mean_loss(spec):
    quiet = dataclasses.replace(spec, simulated=dataclasses.replace(spec.simulated, noise=0.0))
    shape = quiet.cell(24, 3e8).shape
    assert final_loss(quiet, shape, 7) == mean_loss(quiet, 24, shape.width)


def test_the_curve_reports_every_metric_and_ends_at_the_final_loss(spec):
    shape = spec.cell(6, 1e6).shape
    reports = []
    final = simulate_training(spec, shape, 3, lambda m, ckpt: reports.append((m, ckpt)))
    steps = [m[vocabulary.STEP] for m, _ in reports]
    total = spec.train.total_steps(spec.data.seq_len)
    assert steps == list(range(spec.train.eval_every, total + 1, spec.train.eval_every))
    val = [m[vocabulary.VAL_LOSS] for m, _ in reports]
    assert all(b < a for a, b in itertools.pairwise(val))
    assert val[0] < math.log(spec.data.vocab_size)
    assert final[vocabulary.VAL_LOSS] == final_loss(spec, shape, 3)
    assert final[vocabulary.STATUS] == vocabulary.STATUS_FINISHED
    assert vocabulary.STATUS not in reports[0][0]
    expected = {vocabulary.STEP, vocabulary.TOKENS, vocabulary.ELAPSED_S, *vocabulary.CURVE_SCALARS}
    assert set(reports[0][0]) == expected
    assert all(ckpt is None for _, ckpt in reports)


def test_resuming_from_a_checkpoint_reports_only_the_rest(spec, tmp_path):
    shape = spec.cell(12, 1e7).shape
    full, seen = [], []
    simulate_training(spec, shape, 0, lambda m, _c: full.append(m))

    def stop_after_three(m, ckpt):
        seen.append((m, ckpt))
        if len(seen) == 3:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        simulate_training(spec, shape, 0, stop_after_three, checkpoint_dir=str(tmp_path))
    assert seen[-1][1] == str(tmp_path)
    rest = []
    simulate_training(spec, shape, 0, lambda m, _c: rest.append(m), resume_from=str(tmp_path))
    assert [m[vocabulary.STEP] for m in rest] == [m[vocabulary.STEP] for m in full[3:]]
    assert rest[-1][vocabulary.VAL_LOSS] == full[-1][vocabulary.VAL_LOSS]


def test_an_inprocess_trial_is_recorded_as_simulated(spec):
    request = grid_requests(spec)[0]
    record = run_trial_inprocess(spec, request)
    assert record.simulated and record.completed
    assert record.best_val_loss == final_loss(spec, request.shape, request.seed)


def test_a_depth_whose_partner_changes_gets_a_new_identity(spec):
    raw = spec.to_dict()
    moved = dict(raw, refine={**raw["refine"], "pairs": [[6, 18], [18, 24]]})
    other = spec_from_dict(moved)
    shape = spec.cell(18, 1e8).shape
    assert trial_identity(spec, shape, 0) != trial_identity(other, shape, 0)
    unchanged = spec.cell(6, 1e8).shape  # depth 6 is nobody's deeper depth in either spec
    assert trial_identity(spec, unchanged, 0) == trial_identity(other, unchanged, 0)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"refine": {"pairs": [[6, 18], [12, 18]]}}, "depth 18 is the deeper depth of"),
        ({"refine": {"pairs": [[6, 12], [6, 12]]}}, r"\[6, 12\] is listed twice"),
        ({"simulated": {"seed_correlation": 1.5}}, "simulated.seed_correlation: got 1.5"),
        ({"simulated": {"transition_scale": 0}}, "simulated.transition_scale: got 0.0"),
    ],
)
def test_bad_simulated_settings_are_input_errors(spec, change, message):
    raw = spec.to_dict()
    for section, values in change.items():
        raw[section] = {**raw[section], **values}
    with pytest.raises(InputError, match=message):
        spec_from_dict(raw)


def _late(spec, **fields):
    simulated = dataclasses.replace(spec.simulated, curve="late_descent", **fields)
    return dataclasses.replace(spec, simulated=simulated)


def _val_curve(spec, depth: int, n: float, seed: int) -> list[float]:
    reports: list[dict] = []
    simulate_training(spec, spec.cell(depth, n).shape, seed, lambda m, _c: reports.append(m))
    return [m[vocabulary.VAL_LOSS] for m in reports]


def test_late_descent_curves_end_at_the_same_loss_with_the_deeper_net_behind_until_then(spec):
    late = _late(spec, curve_eval_noise=0.0)
    n = planted_transition(spec.simulated, 12) * 3  # the deeper net wins at the end
    deep, shallow = _val_curve(late, 12, n, 1), _val_curve(late, 6, n, 1)
    assert deep[-1] == _val_curve(spec, 12, n, 1)[-1] == final_loss(spec, spec.cell(12, n).shape, 1)
    assert shallow[-1] == final_loss(spec, spec.cell(6, n).shape, 1)
    partial = [d - s for d, s in zip(deep, shallow, strict=True)]
    assert partial[-1] < 0 < partial[0]  # its partial Δ starts positive and crosses


def test_late_descent_eval_noise_is_reproducible_and_spares_the_last_eval(spec):
    late = _late(spec, curve_eval_noise=0.01)
    quiet = _late(spec, curve_eval_noise=0.0)
    noisy, again, clean = (_val_curve(s, 6, 1e7, 2) for s in (late, late, quiet))
    assert noisy == again
    assert noisy[-1] == clean[-1]
    assert all(abs(a - b) > 0 for a, b in zip(noisy[:-1], clean[:-1], strict=True))


def test_only_a_spec_that_asks_for_late_descent_changes_a_trials_identity(spec):
    shape = spec.cell(6, 1e7).shape
    default = dataclasses.replace(spec.simulated, curve="interpolated")
    same = dataclasses.replace(spec, simulated=default)
    assert trial_identity(spec, shape, 0) == trial_identity(same, shape, 0)
    assert trial_identity(spec, shape, 0) != trial_identity(_late(spec), shape, 0)
