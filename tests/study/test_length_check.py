"""refine.length_check on the simulated backend, through the in-process runner (no Ray).

The simulated surface plants N*(L; steps) = N*(L)·(steps / length_ref_steps)^length_exponent,
so at a factor f on the training length the true shift is ln(N*_f / N*) = length_exponent·ln f.
"""

import copy
import math

import pyarrow.parquet as pq
import pytest

from dwtune.backends.simulated import length_shifted, mean_sign_changes, planted_transition
from dwtune.cli import main
from dwtune.core.records import trial_identity
from dwtune.core.refine.design import design_for
from dwtune.core.spec import spec_from_dict
from dwtune.core.vocabulary import LENGTH_CHECK_FILE, REPORT_FILE, Stage
from dwtune.storage.experiment import export_experiment
from dwtune.study import refine as refine_stage
from dwtune.study.length_check import run_length_check
from dwtune.study.pipeline import finish
from dwtune.study.runners.local import LocalRunner
from tests.helpers.refine_study import grid_done

FACTORS = (0.5, 2.0)
# Depths 6 and 12; grid 1e6..1e9; a = 5.46 puts N*(12) at 3.0e7, so N* halved or doubled stays
# inside the grid's bracket [1e7, 1e8]. steps = length_ref_steps: the spec's own N* is planted.
BASE = {
    "name": "length_check_test",
    "trainer": "simulated",
    "data": {"tokenizer": "bpe", "vocab_size": 2000, "seq_len": 128},
    "model": {"heads": 2, "width_multiple": 2},
    "space": {"depths": [6, 12], "budgets": {"min": 1e6, "max": 1e9, "num": 4}, "seeds": 2},
    "train": {"steps": 1000, "batch_size": 8, "eval_every": 500},
    "refine": {
        "pairs": [[6, 12]],
        "tolerance": 0.1,
        "seeds": 2,
        "max_seeds": 4,
        "max_rounds": 8,
        "length_check": list(FACTORS),
    },
    "simulated": {"a": 5.46},
}


def make_spec(length_exponent: float, **refine):
    raw = copy.deepcopy(BASE)
    raw["simulated"]["length_exponent"] = length_exponent
    raw["refine"].update(refine)
    return spec_from_dict(raw)


class Study:
    """Grid, refine and length check of one spec in one experiment directory."""

    def __init__(self, root, spec):
        self.spec = spec
        self.store = grid_done(root, spec)
        self.lines: list[str] = []
        self.grid_points = self._grid_deltas()
        self.rows, self.trained = self.check()

    def check(self):
        """Refine (or resume), then the length check; returns its rows and new trainings."""
        runner = LocalRunner(self.spec, self.store)
        stage = refine_stage.RefineStage(self.spec, self.store)
        transitions = stage.run(runner.run)
        before = runner.trained
        rows = run_length_check(
            self.spec, self.store, stage, transitions, runner.run, self.lines.append
        )
        return rows, runner.trained - before

    def _grid_deltas(self):
        grid = refine_stage.pair_starts(self.spec, design_for(self.spec), self.store.records())[0]
        return [(p.budget, p.deltas) for p in grid.points]


@pytest.fixture(scope="module")
def flat(tmp_path_factory):
    """No length dependence: N* is the same at every length."""
    return Study(tmp_path_factory.mktemp("flat"), make_spec(0.0))


@pytest.fixture(scope="module")
def moving(tmp_path_factory):
    """N* proportional to the training length."""
    return Study(tmp_path_factory.mktemp("moving"), make_spec(1.0))


def test_the_planted_surface_moves_n_star_with_the_length():
    spec = make_spec(1.0)
    for factor in FACTORS:
        config = length_shifted(spec.simulated, round(1000 * factor))
        [crossing] = mean_sign_changes(config, 6, 12)
        assert crossing == pytest.approx(factor * planted_transition(spec.simulated, 12))
    assert length_shifted(make_spec(0.0).simulated, 4000) == make_spec(0.0).simulated


def test_the_length_exponent_enters_the_identity_only_when_set():
    shape = make_spec(0.0).cell(6, 1e6).shape
    raw = copy.deepcopy(BASE)
    raw["simulated"].pop("a")
    plain = spec_from_dict(raw)
    raw["simulated"]["length_exponent"] = 0.0
    assert trial_identity(spec_from_dict(raw), shape, 0) == trial_identity(plain, shape, 0)
    raw["simulated"]["length_exponent"] = 1.0
    assert trial_identity(spec_from_dict(raw), shape, 0) != trial_identity(plain, shape, 0)


def test_without_a_length_dependence_nothing_moves(flat):
    assert [r.factor for r in flat.rows] == list(FACTORS)
    for row in flat.rows:
        assert row.status == "bracketed" and not row.moved
        assert abs(row.shift_interval) < 1
        assert abs(row.shift) < 0.05  # e-folds; the planted exponent-1 move below is 0.69
    assert len(flat.lines) == len(FACTORS)
    assert all("within its 95% interval" in line for line in flat.lines)


def test_a_planted_length_dependence_moves_n_star_by_its_size_and_is_flagged(moving):
    for row in moving.rows:
        expected = math.log(row.factor)  # length_exponent 1
        assert row.status == "bracketed"
        assert math.copysign(1, row.shift) == math.copysign(1, expected)
        assert abs(row.shift - expected) < 0.1, (row.factor, row.shift)
        assert row.moved and abs(row.shift_interval) > 1
        assert abs(row.shift_sigma) > 10
    assert all("MOVED by more than its 95% interval" in line for line in moving.lines)


def test_the_checked_trainings_are_their_own_trials_at_the_scaled_length(moving):
    records = [r for r in moving.store.records() if r.stage == Stage.LENGTH_CHECK]
    assert {r.steps for r in records} == {500, 2000}
    assert sum(row.trials for row in moving.rows) == len(records) > 0
    assert moving.trained == len(records)


def test_length_check_trials_never_become_grid_points(moving):
    assert moving._grid_deltas() == moving.grid_points


def test_a_rerun_trains_nothing_and_writes_the_same_table(moving):
    path = moving.store.root / LENGTH_CHECK_FILE
    first = pq.read_table(path).to_pylist()
    rows, trained = moving.check()
    assert trained == 0
    assert rows == moving.rows
    assert pq.read_table(path).to_pylist() == first


def test_the_table_and_the_report_flag_the_moved_transition(moving):
    table = pq.read_table(moving.store.root / LENGTH_CHECK_FILE).to_pylist()
    assert [(r["pair"], r["factor"], r["moved"]) for r in table] == [
        ("6-12", 0.5, True),
        ("6-12", 2.0, True),
    ]
    export_experiment(moving.store)
    finish(moving.store)
    report = (moving.store.root / REPORT_FILE).read_text()
    section = report.split("## Training-length robustness")[1].split("\n## ")[0]
    assert "⚠ 1 pair(s) move by more than their interval: 6-12" in section
    assert section.count("⚠ moved beyond its interval") == 2


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1.0], "refine.length_check: got 1.0; expected factors"),
        ([0.0], "refine.length_check: got 0.0; expected factors"),
        ([-0.5], "refine.length_check: got -0.5; expected factors"),
        ([1000], "refine.length_check: got 1000.0; expected factors"),
        ([math.inf], "refine.length_check: got inf; expected a finite number"),
        (["abc"], "refine.length_check: got 'abc'; expected a number"),
        (2.0, "refine.length_check: got 2.0; expected a list"),
        ([2.0, 2.0], "list each factor once"),
        ([0.5, 0.8, 1.5, 2.0, 3.0], "refine.length_check (entries): got 5; the maximum is 4"),
        ([1.0004], "1.0004 × 1000 rounds to the same training length"),
    ],
)
def test_bad_length_check_is_one_line_and_exit_code_2(value, message, tmp_path, capsys, write_spec):
    raw = copy.deepcopy(BASE)
    raw["refine"]["length_check"] = value
    raw["name"] = f"bad_{tmp_path.name}"
    assert main(["plan", str(write_spec(raw))]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
