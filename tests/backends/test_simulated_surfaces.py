"""The hard simulated surfaces: each formula, the default left bit-for-bit, identity, validation."""

import dataclasses
import hashlib
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from dwtune.backends.simulated import (
    divergence_probability,
    final_loss,
    link_term,
    loss_noise_sd,
    lr_optimum,
    lr_penalty,
    mean_loss,
    mean_sign_changes,
    pair_delta_mean,
    pair_seed_outcomes,
    paired_noise_sd,
    planted_chain,
    planted_transition,
    seed_outcome,
    simulate_training,
    size_term,
)
from dwtune.backends.trial import run_trial_inprocess
from dwtune.core import vocabulary
from dwtune.core.errors import InputError
from dwtune.core.records import grid_requests, trial_identity
from dwtune.core.spec import SimulatedConfig, load_spec, spec_from_dict
from dwtune.core.spec.sections import SIMULATED_SURFACES
from dwtune.storage.tables import trials_table

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"
PAIRS = ((6, 12), (12, 18), (18, 24))
SEEDS = range(4000)


@pytest.fixture(scope="module")
def spec():
    return load_spec(SPACES / "simulated.yaml")


def on(spec, **changes):
    return dataclasses.replace(spec, simulated=dataclasses.replace(spec.simulated, **changes))


def surface(name: str, **changes) -> SimulatedConfig:
    if name == "lr_mistuned":
        changes.setdefault("lr_penalty", 0.02)
    return SimulatedConfig(surface=name, **changes)


def binomial_bounds(n: int, p: float, z: float = 4.0) -> tuple[float, float]:
    half = z * math.sqrt(n * p * (1 - p))
    return n * p - half, n * p + half


# --------------------------------------------------------------------------- default unchanged


ORIGINAL_FIELDS = ("a", "b", "noise", "seconds_per_step", "gap", "transition_scale")
ORIGINAL_FIELDS += ("seed_correlation",)


def _old_normal(*key):
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).digest()
    return float(np.random.default_rng(int.from_bytes(digest[:8], "little")).standard_normal())


def test_the_default_surface_keeps_the_original_formula_and_identity_bit_for_bit(spec):
    config = spec.simulated
    for request in grid_requests(spec)[::7]:
        shape, seed = request.shape, request.seed + 3
        n = 12 * shape.depth * shape.width * shape.width
        links = planted_chain(spec.refine.pairs, shape.depth)[:-1]
        mean = size_term(n) + sum(
            config.gap * math.tanh((math.log(planted_transition(config, d)) - math.log(n)) / 0.5)
            for d in links
        )
        noise = math.sqrt(0.5) * _old_normal("seed", seed) + math.sqrt(0.5) * _old_normal(
            "trial", dataclasses.asdict(shape), seed
        )
        assert final_loss(spec, shape, seed) == mean + config.noise * noise
        old_payload = {
            "v": 1,
            "shape": dataclasses.asdict(shape),
            # the train fields as they were before issue 12 added lr_search, tokens_per_param
            # (and issue 24 micro_batch_size, activation_checkpointing: never in an identity)
            "train": {
                k: v
                for k, v in dataclasses.asdict(spec.train).items()
                if k
                not in (
                    "lr_search",
                    "tokens_per_param",
                    "micro_batch_size",
                    "activation_checkpointing",
                )
            },
            # fields added since (max_epochs, bpe_sample_mb at its default) are not in it
            "data": {
                k: v
                for k, v in dataclasses.asdict(spec.data).items()
                if k not in ("cache_dir", "max_epochs", "bpe_sample_mb")
            },
            "seed": seed,
            "trainer": "simulated",
            "simulated": {k: getattr(config, k) for k in ORIGINAL_FIELDS},
            "planted_chain": list(planted_chain(spec.refine.pairs, shape.depth)),
        }
        blob = json.dumps(old_payload, sort_keys=True, default=str).encode()
        assert trial_identity(spec, shape, seed) == hashlib.sha256(blob).hexdigest()[:16]


def test_a_changed_surface_knob_is_part_of_the_identity(spec):
    shape = spec.cell(12, 1e8).shape
    base = trial_identity(spec, shape, 0)
    assert trial_identity(on(spec, surface="outliers"), shape, 0) != base
    assert trial_identity(on(spec, dip_width=0.25), shape, 0) != base
    assert trial_identity(on(spec, dip_width=0.5), shape, 0) == base  # its default


# --------------------------------------------------------------------------- planted crossings


@pytest.mark.parametrize("name", [s for s in SIMULATED_SURFACES if s != "lr_mistuned"])
def test_every_surface_changes_sign_at_the_planted_size(name):
    config = surface(name)
    for shallow, deep in PAIRS:
        n_star = planted_transition(config, deep)
        below, at, above = (
            pair_delta_mean(config, shallow, deep, n_star * f) for f in (0.99, 1.0, 1.01)
        )
        assert below > 0 > above
        assert abs(at) < 1e-15
        assert mean_sign_changes(config, shallow, deep)[-1] == pytest.approx(n_star, rel=1e-9)


@pytest.mark.parametrize("name", SIMULATED_SURFACES)
def test_the_pair_delta_is_the_loss_difference_of_the_backend_at_equal_size(spec, name):
    config = surface(name)
    hard = dataclasses.replace(spec, simulated=config)
    for shallow, deep in spec.refine.pairs[:3]:
        for n in np.geomspace(1e6, 1e10, 7):
            widths = (math.sqrt(n / (12 * d)) for d in (deep, shallow))
            loss_deep, loss_shallow = (
                mean_loss(hard, d, w, lr=3e-3) for d, w in zip((deep, shallow), widths, strict=True)
            )
            assert loss_deep - loss_shallow == pytest.approx(
                pair_delta_mean(config, shallow, deep, n, lr=3e-3), abs=1e-12
            )


@pytest.mark.parametrize("name", ["default", "depth_noise", "lr_mistuned"])
def test_paired_seed_outcomes_scatter_around_the_pair_delta_with_the_paired_sd(name):
    config = surface(name, noise=0.01)
    n = planted_transition(config, 12) / 2
    draws = [pair_seed_outcomes(config, 6, 12, n, s, lr=6e-3) for s in SEEDS]
    delta = np.array([deep.loss - shallow.loss for shallow, deep in draws])
    sd = paired_noise_sd(config, 6, 12)
    assert delta.std() == pytest.approx(sd, rel=0.06)
    mean = pair_delta_mean(config, 6, 12, n, lr=6e-3)
    assert abs(delta.mean() - mean) < 4 * sd / math.sqrt(len(SEEDS))
    again = pair_seed_outcomes(config, 6, 12, n, 17, lr=6e-3)
    assert again == draws[17]


def test_non_monotone_dips_below_zero_once_before_the_real_crossing():
    config = surface("non_monotone")
    n_star = planted_transition(config, 12)
    crossings = mean_sign_changes(config, 6, 12)
    assert len(crossings) == 3
    dip_in, dip_out, real = crossings
    assert real == pytest.approx(n_star, rel=1e-9)
    centre = n_star * math.exp(-config.dip_offset)
    assert dip_in < centre < dip_out < n_star
    assert pair_delta_mean(config, 6, 12, centre) < -0.4 * config.gap
    assert pair_delta_mean(config, 6, 12, math.sqrt(dip_out * n_star)) > 0  # positive again
    assert pair_delta_mean(config, 6, 12, dip_in / 2) > 0
    assert len(mean_sign_changes(SimulatedConfig(), 6, 12)) == 1  # the default has one


def test_asymmetric_has_different_slopes_on_both_sides_and_a_smaller_deep_gap():
    config = surface("asymmetric")
    x_star, h = math.log(planted_transition(config, 12)), 1e-6
    below = (pair_delta_mean(config, 6, 12, math.exp(x_star - h)) - 0) / h
    above = (0 - pair_delta_mean(config, 6, 12, math.exp(x_star + h))) / h
    assert below == pytest.approx(config.gap / config.transition_scale, rel=1e-4)
    ratio = config.asymmetry_gap_ratio * config.asymmetry_power
    assert above / below == pytest.approx(ratio, rel=1e-4)
    far = link_term(config, 12, x_star + 1e4)  # 20,000 scales past N*
    assert far == pytest.approx(-config.asymmetry_gap_ratio * config.gap, rel=0.05)
    tanh_like = -config.asymmetry_gap_ratio * config.gap * math.tanh(3.0 * ratio)
    assert pair_delta_mean(config, 6, 12, math.exp(x_star + 3 * 0.5)) != pytest.approx(tanh_like)


# --------------------------------------------------------------------------- noise models


def _losses(config, depth, n, seeds=SEEDS, lr=None):
    width = math.sqrt(n / (12 * depth))
    linked = planted_chain(PAIRS, depth)[:-1]
    return np.array([seed_outcome(config, linked, depth, width, s, lr=lr).loss for s in seeds])


def test_depth_noise_grows_with_depth_and_the_gap_shrinks():
    config = surface("depth_noise", noise=0.01)
    sds = [loss_noise_sd(config, d) for d in (6, 12, 18)]
    assert sds == pytest.approx([0.01 * (1 + 0.1 * (d - 1)) for d in (6, 12, 18)])
    for depth, sd in zip((6, 12, 18), sds, strict=True):
        assert _losses(config, depth, 1e8).std() == pytest.approx(sd, rel=0.06)
    delta = _losses(config, 18, 1e8) - _losses(config, 12, 1e8)
    assert delta.std() == pytest.approx(paired_noise_sd(config, 12, 18), rel=0.06)
    assert paired_noise_sd(config, 12, 18) > paired_noise_sd(SimulatedConfig(noise=0.01))
    far = [abs(pair_delta_mean(config, s, d, 1e3)) for s, d in PAIRS]
    assert far == pytest.approx([0.05 / (1 + 0.1 * (d - 1)) for _, d in PAIRS], rel=1e-6)
    assert far[0] > far[1] > far[2]


def test_outliers_hit_their_share_of_trainings_by_their_size():
    config = surface("outliers", outlier_min_depth=12)
    plain = dataclasses.replace(config, surface="default")
    spikes = _losses(config, 12, 1e8) - _losses(plain, 12, 1e8)
    hit = np.isclose(spikes, config.outlier_size, atol=1e-12)
    assert np.all(hit | (spikes == 0))
    low, high = binomial_bounds(len(SEEDS), config.outlier_share)
    assert low <= hit.sum() <= high
    shallow = _losses(config, 6, 1e8) - _losses(plain, 6, 1e8)
    assert np.all(shallow == 0)  # below outlier_min_depth


def test_divergence_probability_rises_with_depth_and_learning_rate():
    config = surface("divergences")
    by_depth = [divergence_probability(config, d, 3e-3) for d in (1, 6, 12, 24, 48)]
    by_lr = [divergence_probability(config, 12, lr) for lr in (1e-3, 3e-3, 1e-2, 3e-2)]
    assert all(b > a for a, b in itertools.pairwise(by_depth))
    assert all(b > a for a, b in itertools.pairwise(by_lr))
    assert divergence_probability(SimulatedConfig(), 48, 1.0) == 0.0
    for depth, lr in ((6, 3e-3), (24, 1e-2)):
        losses = _losses(config, depth, 1e8, lr=lr)
        low, high = binomial_bounds(len(SEEDS), divergence_probability(config, depth, lr))
        assert low <= np.isnan(losses).sum() <= high


def test_a_diverged_simulated_training_reports_like_the_torch_trainer(spec):
    hard = on(spec, surface="divergences", diverge_logit=20.0)  # every training diverges
    request = grid_requests(hard)[0]
    reports = []
    final = simulate_training(hard, request.shape, 0, lambda m, _c: reports.append(m))
    total = hard.train.total_steps(hard.data.seq_len)
    assert final[vocabulary.STATUS] == vocabulary.STATUS_DIVERGED
    assert math.isnan(final[vocabulary.VAL_LOSS]) and math.isnan(final[vocabulary.TRAIN_LOSS])
    assert final[vocabulary.STEP] < total or len(reports) < total // hard.train.eval_every
    assert [vocabulary.STATUS in r for r in reports] == [False] * (len(reports) - 1) + [True]
    assert all(math.isfinite(r[vocabulary.VAL_LOSS]) for r in reports[:-1])
    record = run_trial_inprocess(hard, request)
    assert record.status == vocabulary.STATUS_DIVERGED and not record.completed
    assert math.isnan(record.final_val_loss)
    assert math.isnan(final_loss(hard, request.shape, request.seed))


# --------------------------------------------------------------------------- learning rate


def test_the_lr_penalty_is_least_at_lr_opt_which_falls_as_one_over_width():
    config = surface("lr_mistuned")
    for width in (128.0, 256.0, 1024.0):
        rates = np.geomspace(1e-5, 1e-1, 2001)
        best = rates[np.argmin([lr_penalty(config, width, lr) for lr in rates])]
        assert best == pytest.approx(lr_optimum(config, width), rel=0.01)
        assert lr_penalty(config, width, lr_optimum(config, width)) == pytest.approx(0, abs=1e-15)
        assert lr_optimum(config, 2 * width) == pytest.approx(lr_optimum(config, width) / 2)
    assert lr_penalty(config, 512.0, 3e-3 * math.e) == pytest.approx(0.02 * (1 + math.log(2)) ** 2)
    flat = dataclasses.replace(config, lr_width_exponent=0.0)
    assert lr_optimum(flat, 64.0) == lr_optimum(flat, 4096.0) == config.lr_opt


def test_one_shared_rate_mistunes_the_two_nets_of_a_pair_and_moves_the_crossing(spec):
    config = surface("lr_mistuned")
    n_star = planted_transition(config, 12)
    shallow, deep = (lr_penalty(config, math.sqrt(n_star / (12 * d)), 3e-3) for d in (6, 12))
    assert shallow != pytest.approx(deep)
    assert pair_delta_mean(config, 6, 12, n_star, lr=3e-3) == pytest.approx(deep - shallow)
    (moved,) = mean_sign_changes(config, 6, 12, lr=3e-3)
    assert abs(math.log(moved / n_star)) > 0.01
    assert pair_delta_mean(config, 6, 12, moved, lr=3e-3) == pytest.approx(0, abs=1e-12)
    hard = dataclasses.replace(spec, simulated=config)
    shape = hard.cell(12, 1e8).shape
    assert final_loss(hard, shape, 1) == final_loss(hard, shape, 1, lr=hard.train.lr)
    assert final_loss(hard, shape, 1, lr=10 * hard.train.lr) > final_loss(hard, shape, 1)
    reports = []
    end = simulate_training(hard, shape, 1, lambda m, _c: reports.append(m), lr=1e-2)
    assert end[vocabulary.VAL_LOSS] == final_loss(hard, shape, 1, lr=1e-2)


# --------------------------------------------------------------------------- specs and errors


def test_the_shipped_hard_spec_runs_on_every_surface():
    hard = load_spec(SPACES / "simulated_hard.yaml")
    assert hard.simulated.surface != "default"
    for name in SIMULATED_SURFACES:
        raw = hard.to_dict()
        penalty = 0.02 if name == "lr_mistuned" else raw["simulated"]["lr_penalty"]
        raw["simulated"] = {**raw["simulated"], "surface": name, "lr_penalty": penalty}
        spec = spec_from_dict(raw)
        record = run_trial_inprocess(spec, grid_requests(spec)[-1])
        assert trials_table([record]).column("surface").to_pylist() == [name]
        assert record.simulated and record.status in (
            *vocabulary.COMPLETED_STATUSES,
            vocabulary.STATUS_DIVERGED,
        )


NON_FINITE_FIELDS = [
    f.name for f in dataclasses.fields(SimulatedConfig) if isinstance(f.default, float)
]


@pytest.mark.parametrize("field", NON_FINITE_FIELDS)
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_non_finite_simulated_knobs_are_input_errors(spec, field, value):
    raw = spec.to_dict()
    raw["simulated"] = {**raw["simulated"], field: value}
    with pytest.raises(InputError, match=f"simulated.{field}: got"):
        spec_from_dict(raw)


@pytest.mark.parametrize(
    "values, message",
    [
        ({"surface": "wavy"}, "simulated.surface: got 'wavy'; expected one of default"),
        ({"surface": "lr_mistuned"}, "simulated.lr_penalty: got 0.0 with surface lr_mistuned"),
        ({"dip_width": 2.5}, "simulated.dip_width: got 2.5; expected less than"),
        ({"outlier_share": 1.5}, "simulated.outlier_share: got 1.5"),
        ({"lr_opt": 0}, "simulated.lr_opt: got 0"),
        ({"noise_depth_slope": -1}, "simulated.noise_depth_slope: got -1"),
    ],
)
def test_bad_surface_settings_are_input_errors(spec, values, message):
    raw = spec.to_dict()
    raw["simulated"] = {**raw["simulated"], **values}
    with pytest.raises(InputError, match=message):
        spec_from_dict(raw)


def test_a_seeds_luck_persists_across_sizes_at_the_planted_correlation():
    from dwtune.backends.simulated_surface import pair_seed_outcomes
    from dwtune.core.spec import SimulatedConfig

    def deviations(c):
        config = SimulatedConfig(seed_size_correlation=c)
        rows = []
        for n in (1e7, 3e7):
            rows.append(
                [
                    (lambda s, d: d.loss - s.loss)(*pair_seed_outcomes(config, 12, 18, n, seed))
                    for seed in range(400)
                ]
            )
        return np.array(rows)

    persistent = deviations(0.8)
    assert np.corrcoef(persistent)[0, 1] == pytest.approx(0.8, abs=0.06)
    assert np.std(persistent[0]) == pytest.approx(0.002, rel=0.1)  # each sd unchanged
    assert abs(np.corrcoef(deviations(0.0))[0, 1]) < 0.12
