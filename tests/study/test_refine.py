"""The refine stage on the simulated backend, through an in-process runner (no Ray)."""

import math
from pathlib import Path

import optuna
import pyarrow.parquet as pq
import pytest

from dwtune.backends.simulated import planted_transition
from dwtune.core.errors import InputError
from dwtune.core.refine.design import design_for
from dwtune.core.refine.steps import decide_seeds
from dwtune.core.spec import load_spec
from dwtune.core.vocabulary import TRANSITIONS_FILE
from dwtune.storage.schemas import TRANSITION_SCHEMA
from dwtune.study import refine as refine_stage
from dwtune.study.runners.local import LocalRunner
from tests.helpers.refine_study import grid_done, make_spec

SIMULATED_YAML = Path(__file__).resolve().parents[2] / "search_spaces" / "simulated.yaml"


def study_points(store, pair):
    study = refine_stage.open_study(store, pair, optuna.samplers.RandomSampler())
    return refine_stage.trial_points(study)


class KilledRunner(LocalRunner):
    """Dies (like a killed driver) instead of starting training number ``limit + 1``."""

    def __init__(self, spec, store, limit: int):
        super().__init__(spec, store)
        self.limit, self.ids = limit, []

    def _one(self, request):
        if self.store.read_record(request.trial_id) is None:
            if self.trained >= self.limit:
                raise RuntimeError("driver killed")
            self.ids.append(request.trial_id)
        return super()._one(request)


def test_without_noise_bisection_reaches_tolerance_in_log2_rounds(tmp_path):
    spec = make_spec(refine={"scan_spacing": 0})  # bisection alone (the scan: below)
    store = grid_done(tmp_path, spec)
    [t] = refine_stage.run_refine(spec, store, LocalRunner(spec, store).run)
    grid = refine_stage.pair_starts(spec, design_for(spec), store.records())[0]
    initial = next(p.log_n for p in grid.points if p.decision.mean < 0) - max(
        p.log_n for p in grid.points if p.decision.mean > 0
    )
    expected = math.ceil(math.log2(initial / math.log1p(spec.refine.tolerance)))
    planted = planted_transition(spec.simulated, 12)
    assert t.status == "bracketed" and t.reason == "tolerance reached"
    # no noise: the interval collapses onto the interpolated zero, inside the final bracket
    assert abs(math.log(t.n_star / planted)) <= math.log1p(spec.refine.tolerance) / 2
    assert t.n_star_high / t.n_star_low - 1 <= spec.refine.tolerance
    assert abs(t.rounds - expected) <= 1
    # the grid's bracket ends (one seed) get a second (one seed never decides), two paired
    # seeds per round, then both final bracket ends re-verified with twice their seeds
    assert (t.seeds, t.trials) == (4, 2 * 2 + 4 * t.rounds + 2 * 2 * 2)
    assert (
        abs(math.log(t.width_deep / math.exp(spec.simulated.a + 12 * spec.simulated.b)))
        <= math.log1p(spec.refine.tolerance) / 4
    )


def test_with_noise_seeds_are_added_only_near_the_transition(tmp_path):
    spec = make_spec(simulated={"noise": 0.002}, refine={"tolerance": 0.02})
    store = grid_done(tmp_path, spec)
    [t] = refine_stage.run_refine(spec, store, LocalRunner(spec, store).run)
    planted = math.log(planted_transition(spec.simulated, 12))
    points = study_points(store, (6, 12))
    first = decide_seeds(spec.refine)  # what a point starts with (scan probes: 1)
    extra = [p for p in points if p.requested > first and not p.verified]
    assert extra, "this setting should need extra seeds somewhere"
    # The noise is learned from the pair's own seeds (a prior worth 0.25 observations), so
    # while only the grid's bracket ends have two seeds its t boundary is wide: the end 0.26
    # e-folds from N* (Δ = 0.022, about 18 se) may need a third seed before the noise is known.
    # Beyond 0.3 e-folds no point gets one (|Δ| > 0.025 there, and the noise is known by then).
    assert all(abs(p.log_n - planted) < 0.3 for p in extra)
    far = [p for p in points if abs(p.log_n - planted) >= 0.3 and not p.verified]
    assert far and all(p.requested <= first for p in far)
    assert t.status == "bracketed" and t.seeds == max(p.n for p in points) > 1
    assert abs(math.log(t.n_star) - planted) <= t.log_n_sigma


def test_pairs_outside_the_range_are_censored_with_a_bound(tmp_path):
    # N*(12) = 1.3e7 lies below both sizes, N*(18) = 3.8e7 above both.
    spec = make_spec(
        space={"depths": [6, 12, 18], "budgets": [1.5e7, 3e7]},
        refine={"pairs": [[6, 12], [12, 18]]},
        simulated={"noise": 0.002},
    )
    store = grid_done(tmp_path, spec)
    runner = LocalRunner(spec, store)
    low, high = refine_stage.run_refine(spec, store, runner.run)
    assert (low.status, high.status) == ("censored_low", "censored_high")
    # no bisection; each censored edge (one grid seed) gets a second seed, since one seed
    # never decides, then is re-verified with twice its seeds: 3 paired seeds more
    assert runner.trained == 12 and low.trials == high.trials == 6 and low.rounds == 0
    assert math.isnan(low.n_star) and math.isnan(high.width_deep)
    assert low.n_star_high == pytest.approx(1.5e7, rel=0.02) and math.isnan(low.n_star_low)
    assert high.n_star_low == pytest.approx(3e7, rel=0.02) and math.isnan(high.n_star_high)
    assert "lower space.budgets' minimum" in refine_stage.describe(low)
    assert "raise space.budgets' maximum" in refine_stage.describe(high)


def test_delta_within_noise_at_the_range_edge_is_undecided(tmp_path):
    # The top size lies 4% below N*(12): Δ = +0.004 there, under a paired noise of 0.01.
    spec = make_spec(space={"budgets": [1e6, 1.25e7]}, simulated={"noise": 0.01})
    store = grid_done(tmp_path, spec)
    runner = LocalRunner(spec, store)
    [t] = refine_stage.run_refine(spec, store, runner.run)
    assert t.status == "undecided" and math.isnan(t.n_star)
    assert t.seeds == spec.refine.max_seeds
    # the undecided gap between the decided edge (1e6) and the top is cut, not left: the
    # cuts move the decided edge up towards the top, each a round (issue 48)
    assert 0 < t.rounds <= spec.refine.max_rounds and t.trials == runner.trained
    # the decided edge still bounds N* from below (what the law fit uses); nothing above
    assert 1e6 < t.n_star_low < 1.25e7 and math.isnan(t.n_star_high)
    assert t.statement.startswith(f"N* > {t.n_star_low:.3g} at 95%")
    assert "refine.max_seeds" in refine_stage.describe(t)


@pytest.mark.parametrize("limit", [1, 6])
def test_a_killed_stage_resumes_to_the_same_transitions_without_retraining(tmp_path, limit):
    spec = make_spec(simulated={"noise": 0.002}, refine={"tolerance": 0.02})
    whole_store = grid_done(tmp_path / "whole", spec)
    whole_runner = LocalRunner(spec, whole_store)
    whole = refine_stage.run_refine(spec, whole_store, whole_runner.run)

    store = grid_done(tmp_path / "killed", spec)
    killed = KilledRunner(spec, store, limit)
    with pytest.raises(RuntimeError, match="driver killed"):
        refine_stage.run_refine(spec, store, killed.run)
    resumed = KilledRunner(spec, store, limit=10**6)
    again = refine_stage.run_refine(spec, store, resumed.run)

    assert again == whole
    assert killed.trained == limit
    assert killed.trained + resumed.trained == whole_runner.trained
    assert not set(killed.ids) & set(resumed.ids)  # nothing trained twice


def test_a_corrupt_journal_is_an_input_error_and_deleting_it_restarts_the_pairs(tmp_path):
    spec = make_spec(space={"depths": [6, 12, 18]}, refine={"pairs": [[6, 12], [12, 18]]})
    store = grid_done(tmp_path, spec)
    first = refine_stage.run_refine(spec, store, LocalRunner(spec, store).run)
    journal = refine_stage.journal_path(store)
    assert refine_stage.study_path(store, (12, 18)) == journal  # every pair's study in one file
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join([lines[0], b"{not json\n", *lines[1:]]))
    before = {p.name: p.read_bytes() for p in (store.root / "trials").iterdir()}
    runner = LocalRunner(spec, store)
    with pytest.raises(
        InputError, match=rf"{journal}: corrupt Optuna journal.*remove optuna.journal to restart"
    ):
        refine_stage.run_refine(spec, store, runner.run)
    assert runner.trained == 0
    assert {p.name: p.read_bytes() for p in (store.root / "trials").iterdir()} == before
    journal.unlink()
    assert refine_stage.run_refine(spec, store, runner.run) == first
    assert runner.trained == 0  # the restarted pairs' trainings were all recorded


def test_one_journal_holds_a_study_per_pair_as_optuna_dashboard_lists_them(tmp_path):
    spec = make_spec(space={"depths": [6, 12, 18]}, refine={"pairs": [[6, 12], [12, 18]]})
    store = grid_done(tmp_path, spec)
    refine_stage.run_refine(spec, store, LocalRunner(spec, store).run)
    assert sorted(p.name for p in (store.root / "refine").iterdir()) == ["optuna.journal"]
    backend = optuna.storages.journal.JournalFileBackend(str(refine_stage.journal_path(store)))
    storage = optuna.storages.JournalStorage(backend)
    assert sorted(optuna.get_all_study_names(storage)) == ["12-18", "6-12"]
    for name in ("6-12", "12-18"):
        study = optuna.load_study(study_name=name, storage=storage)
        assert study.user_attrs["pair"] == name and study.user_attrs["final"] is True


def _to_per_pair_journals(store, pairs, keep: int) -> None:
    """The layout an experiment written before holds: ``refine/<Ls>-<Ld>.journal`` per pair
    (study ``refine-<Ls>-<Ld>``), each keeping its first ``keep`` trials (a killed stage)."""
    shared = refine_stage.journal_path(store)
    source = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(shared)))
    for a, b in pairs:
        study = optuna.load_study(study_name=f"{a}-{b}", storage=source)
        old = shared.parent / f"{a}-{b}.journal"
        target = optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(old))
        )
        copy = optuna.create_study(study_name=f"refine-{a}-{b}", storage=target)
        copy.add_trials(study.trials[:keep])
    shared.unlink()


def test_an_experiment_with_a_journal_per_pair_resumes_there(tmp_path):
    pairs = [(6, 12), (12, 18)]
    spec = make_spec(space={"depths": [6, 12, 18]}, refine={"pairs": [list(p) for p in pairs]})
    store = grid_done(tmp_path, spec)
    first = refine_stage.run_refine(spec, store, LocalRunner(spec, store).run)
    _to_per_pair_journals(store, pairs, keep=2)
    runner = LocalRunner(spec, store)
    assert refine_stage.run_refine(spec, store, runner.run) == first
    assert runner.trained == 0  # every training of the old journals was recorded
    refine = store.root / "refine"
    assert sorted(p.name for p in refine.iterdir()) == ["12-18.journal", "6-12.journal"]
    for pair in pairs:
        assert refine_stage.study_path(store, pair) == refine / f"{pair[0]}-{pair[1]}.journal"
        assert len(study_points(store, pair)) > 2  # the pair went on in its own journal


def test_transitions_parquet_has_exactly_the_documented_columns(tmp_path):
    spec = make_spec()
    store = grid_done(tmp_path, spec)
    [t] = refine_stage.run_refine(spec, store, LocalRunner(spec, store).run)
    table = pq.read_table(store.root / TRANSITIONS_FILE)
    assert table.schema.remove_metadata() == TRANSITION_SCHEMA
    row = table.to_pylist()[0]
    assert row["pair"] == "6-12" and row["status"] == "bracketed" and row["simulated"] is True
    assert row["width_deep"] == t.width_deep and row["trials"] == t.trials
    assert b"dwtune.core.spec" in table.schema.metadata


@pytest.mark.slow  # a whole simulated study
def test_simulated_yaml_recovers_every_planted_transition_within_its_uncertainty(tmp_path):
    spec = load_spec(SIMULATED_YAML)
    store = grid_done(tmp_path, spec)
    transitions = refine_stage.run_refine(spec, store, LocalRunner(spec, store).run)
    assert [t.status for t in transitions] == ["bracketed"] * len(spec.refine.pairs)
    # Calibrated 95% intervals of 6 pairs all contain the truth only 74% of the time; at most
    # one miss has probability 97%. This run misses once (pair 12-18: one 4-seed point 2.8
    # sd off): see benchmarks/coverage.py for the measured coverage.
    missed = []
    for t in transitions:
        # nested; the 68% interval reaches a 95% end only where the reported N* (kept within
        # the 95% interval) sits on it (pair 12-18 here: the line's crossing lay 0.0006
        # e-folds past the chord's upper end, nearer the planted N*)
        assert t.simulated and t.n_star_low <= t.n_star_low_68 < t.n_star_high_68 <= t.n_star_high
        assert t.n_star_low < t.n_star_low_68 or t.n_star == t.n_star_low
        assert t.n_star_high_68 < t.n_star_high or t.n_star == t.n_star_high
        planted = planted_transition(spec.simulated, t.depth_deep)
        if not t.n_star_low <= planted <= t.n_star_high:
            missed.append(t.pair)
            continue
        planted_width = math.exp(spec.simulated.a + spec.simulated.b * t.depth_deep)
        assert abs(t.width_deep - planted_width) <= 2 * t.width_deep_err * 1.01, t
    assert len(missed) <= 1, missed


def test_pair_deltas_parquet_holds_every_paired_delta_of_every_point(tmp_path):
    from dwtune.core.refine import points as core_points
    from dwtune.core.vocabulary import PAIR_DELTAS_FILE
    from dwtune.storage.tables import read_pair_deltas

    spec = make_spec(simulated={"noise": 0.002})
    store = grid_done(tmp_path, spec)
    refine_stage.run_refine(spec, store, LocalRunner(spec, store).run)
    [pair] = read_pair_deltas(store.root / PAIR_DELTAS_FILE)
    grid = refine_stage.pair_starts(spec, design_for(spec), store.records())[0].points
    expected = core_points.merge_points(grid, study_points(store, (6, 12)))
    assert (pair.label, pair.depth_shallow, pair.depth_deep) == ("6-12", 6, 12)
    assert [p.n for p in pair.points] == pytest.approx([math.exp(p.log_n) for p in expected])
    assert [p.deltas for p in pair.points] == [p.deltas for p in expected]
    assert [p.seeds for p in pair.points] == [p.seeds for p in expected]


def test_the_scan_finds_a_dip_between_grid_sizes_that_bisection_alone_misses(tmp_path):
    # N*(12) = 1.3e7; a dip 1.3 e-folds below it (about 3.5e6) lies between the grid's 1e6
    # and 1e7, more than its half-width from both, so without the scan the pair looks
    # bracketed with one crossing
    dip = {"surface": "non_monotone", "dip_offset": 1.3, "dip_width": 0.5}
    found = []
    for name, scan in (("off", 0), ("on", 0.35)):
        spec = make_spec(refine={"scan_spacing": scan}, simulated=dip)
        store = grid_done(tmp_path / name, spec)
        [t] = refine_stage.run_refine(spec, store, LocalRunner(spec, store).run)
        found.append(t)
    assert found[0].status == "bracketed"
    assert found[1].status == "non_monotone" and len(found[1].crossings) >= 2
    assert math.isnan(found[1].n_star)
