"""refine.design: law, end to end on the simulated backend (grid and refine stages in process):
a pair is bracketed with the law's two sizes as its first points, a censored start extends, a
rerun resumes without training, and every pair of the study is bracketed with the planted law
at the reference and with its slope b 30% off either way."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dwtune.backends.simulated_surface import planted_transition
from dwtune.core.fit.censored import running_law
from dwtune.core.projection import reference, transition_size
from dwtune.core.records import grid_requests
from dwtune.core.refine.design import design_for
from dwtune.core.refine.first_points import extended_trend
from dwtune.core.spec import load_spec
from dwtune.core.vocabulary import StepKind, TransitionStatus
from dwtune.storage.store import ExperimentStore
from dwtune.study.refine import RefineStage, observations, refine_in_process
from dwtune.study.runners.local import LocalRunner

ROOT = Path(__file__).resolve().parents[2]
SIMULATED = ROOT / "search_spaces" / "simulated.yaml"
LAW = ("refine.design=law",)
B = reference("levine2020").b


def _planted(spec) -> dict[str, float]:
    return {f"{s}-{d}": planted_transition(spec.simulated, d) for s, d in spec.refine.pairs}


def _run(tmp_path: Path, overrides: tuple[str, ...]):
    spec = load_spec(SIMULATED, (*LAW, *overrides))
    store = ExperimentStore.for_spec(tmp_path, spec)
    transitions, runner = refine_in_process(spec, store)
    return spec, store, transitions, runner


def _assert_bracketed_near_the_planted(spec, transitions) -> None:
    planted = _planted(spec)
    for t in transitions:
        assert t.status == TransitionStatus.BRACKETED, (t.pair, t.status, t.reason)
        # within 0.1 e-folds of the planted N* (calibration is the benchmarks' business)
        assert abs(math.log(t.n_star / planted[t.pair])) < 0.1, (t.pair, t.n_star)


def test_a_pair_starts_at_the_laws_two_sizes_and_a_rerun_trains_nothing(tmp_path):
    spec, store, transitions, runner = _run(tmp_path, ("refine.pairs=[[12,18]]",))
    grid = [r for r in store.records() if r.stage == "grid"]
    deep_sizes = sorted({r.budget for r in grid if r.depth == 18})
    assert deep_sizes == pytest.approx(sorted(design_for(spec).pair_budgets((12, 18))))
    # the shallower net also at the law's N*: three sizes, so its size trend shows a bend
    shallow_sizes = sorted({r.budget for r in grid if r.depth == 12})
    assert shallow_sizes == pytest.approx(
        sorted({*deep_sizes, design_for(spec).law_centre((12, 18))})
    )
    assert {r.depth for r in grid} == {12, 18}  # no other depth is trained
    assert len(RefineStage(spec, store).refiners[0].start.trend.x) == 3
    _assert_bracketed_near_the_planted(spec, transitions)
    first = runner.trained
    again, rerun = refine_in_process(spec, ExperimentStore.for_spec(tmp_path, spec))
    assert rerun.trained == 0 and first > 0
    assert [t.n_star for t in again] == [t.n_star for t in transitions]


def test_a_law_far_off_is_found_by_extending_beyond_the_censored_edge(tmp_path):
    # the planted N* of (12, 18) is 2 e-folds above the reference's: both first sizes lose
    a = reference("levine2020").a + 1.0
    spec, store, transitions, _ = _run(tmp_path, ("refine.pairs=[[12,18]]", f"simulated.a={a}"))
    kinds = {r.point_kind for r in store.records() if r.stage == "refine"}
    assert StepKind.EXTEND in kinds
    assert transition_size(reference("levine2020"), 18) * math.e < transitions[0].n_star
    _assert_bracketed_near_the_planted(spec, transitions)


def test_an_extended_pair_moves_its_shallower_net_along_the_trend_its_extensions_extend(tmp_path):
    # The law 2 e-folds off: the pair extends beyond the shallower depth's two grid sizes, and
    # its points near N* are corrected to equal N along the trend with the extensions' means.
    a = reference("levine2020").a + 1.0
    spec, store, transitions, _ = _run(tmp_path, ("refine.pairs=[[12,18]]", f"simulated.a={a}"))
    stage = RefineStage(spec, store)
    refiner = stage.refiners[0]
    points = refiner.points_of(refiner.study)
    extended = extended_trend(refiner.start.trend, points, refiner._shallow_log_n)
    assert len(extended.x) > len(refiner.start.trend.x) == 3
    for point in points:
        x_shallow = refiner._shallow_log_n(point.budget)
        move = extended.slope_at(x_shallow) * (point.log_n - x_shallow)
        assert point.size_correction == pytest.approx(move, abs=1e-12)
    # the reported N* is the one those points give, and a resume reads the same points
    assert transitions[0].n_star == refiner._estimate("check").n_star


@pytest.mark.slow  # three whole simulated studies
@pytest.mark.parametrize("factor", [1.0, 1.3, 0.7])
def test_every_pair_is_bracketed_with_the_planted_slope_on_or_30_percent_off(tmp_path, factor):
    # b 30% high puts (36, 48)'s N* at 1.4e10: the budget range reaches 1e11 (only its ends
    # matter to the law design: no training at a size it does not choose)
    overrides = (f"simulated.b={B * factor}", "space.budgets={min: 1e6, max: 1e11, num: 2}")
    spec, _, transitions, runner = _run(tmp_path, overrides)
    _assert_bracketed_near_the_planted(spec, transitions)
    assert len(transitions) == 6 and runner.trained > 0


def test_a_later_wave_starts_at_the_law_fitted_on_the_wave_before(tmp_path):
    # b 30% low: the reference misplaces the deeper pairs' N* by 1.0-1.2 e-folds, beyond the
    # reach; the second wave's pairs start at the fit on the first wave's three pairs instead
    pairs = "refine.pairs=[[6,12],[12,18],[18,24],[24,30],[30,36]]"
    overrides = (f"simulated.b={B * 0.7}", pairs, "refine.waves=2")
    spec, store, transitions, runner = _run(tmp_path, overrides)
    _assert_bracketed_near_the_planted(spec, transitions)
    assert [t.pair for t in transitions] == ["6-12", "12-18", "18-24", "24-30", "30-36"]
    first, second = design_for(spec).waves()
    assert len(first) == 3
    law = running_law(observations(transitions[:3]), reference(spec.fit.reference))
    assert law.name == "running fit" and law.b < 0.8 * B  # the first wave found b low
    grid = [r for r in store.records() if r.stage == "grid"]
    planted = _planted(spec)
    for pair in second:
        # its first points lie at the running law's two sizes, within reach of the planted N*
        for depth in pair:
            trained = {round(r.budget) for r in grid if r.depth == depth}
            assert {round(n) for n in design_for(spec).pair_budgets(pair, law)} <= trained
        label = f"{pair[0]}-{pair[1]}"
        assert (
            abs(math.log(design_for(spec).law_centre(pair, law) / planted[label]))
            < spec.refine.reach
        )
        assert (
            abs(math.log(design_for(spec).law_centre(pair) / planted[label]))
            > 2 * spec.refine.reach
        )
        extended = [r for r in store.records() if r.pair == label and r.point_kind == "extend"]
        assert not extended
    # a rerun fits the same law from the same records: it trains nothing, decides the same
    again, rerun = refine_in_process(spec, ExperimentStore.for_spec(tmp_path, spec))
    assert rerun.trained == 0 and runner.trained > 0
    assert [t.n_star for t in again] == [t.n_star for t in transitions]


def test_waves_decide_the_same_with_pairs_advancing_independently(tmp_path):
    # run_on a runner with run_feed: each wave's pairs advance on their own and a later
    # wave's first points go through run; the decisions are those of the stage in rounds
    overrides = (
        f"simulated.b={B * 0.7}",
        "refine.pairs=[[6,12],[12,18],[18,24],[24,30],[30,36]]",
        "refine.waves=2",
    )
    spec, _, in_rounds, _ = _run(tmp_path / "rounds", overrides)
    store = ExperimentStore.for_spec(tmp_path / "feed", spec)
    store.initialise(spec)
    runner = LocalRunner(spec, store)
    runner.run(grid_requests(spec))
    stage = RefineStage(spec, store)
    assert [r.pair for r in stage.refiners] == [(6, 12), (12, 18), (18, 24)]  # the first wave
    fed = stage.run_on(runner)
    assert [r.pair for r in stage.refiners] == [(6, 12), (12, 18), (18, 24), (24, 30), (30, 36)]
    assert len(stage.laws) == 2 and stage.laws[1].name == "running fit"
    assert [(t.pair, t.n_star, t.trials) for t in fed] == [
        (t.pair, t.n_star, t.trials) for t in in_rounds
    ]
