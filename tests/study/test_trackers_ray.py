"""`dwtune run --log-to` on a real local Ray (issue 49): W&B offline and an MLflow file store,
written by Ray Tune's own callbacks and by the study after its refine and fit stages, then read
back from the files: run names, groups, runs per pair, the fit's artifact."""

from __future__ import annotations

import subprocess
from collections import Counter
from unittest import mock

import pandas as pd
import pytest

from tests.helpers.drivers import driver_env, run_command
from tests.helpers.specs import small_simulated
from tests.helpers.trackers import mlflow_runs, wandb_runs

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]

FIT_FILES = ["fit.json", "projections.parquet", "report.md"]


@pytest.fixture(scope="module")
def tracked(write_spec, tmp_path_factory):
    """The small study with one refined pair, logged to W&B by `--log-to wandb` and to MLflow
    by the spec's `trackers` key: 8 grid trials (4 cells × 2 seeds), then 8 refine trials (the
    pair verifies its 4 grid points' signs with 2 seeds more each; max_rounds 0 places no new
    size), the fewest that show both stages' groups."""
    tmp = tmp_path_factory.mktemp("tracked")
    uri = (tmp / "mlruns").as_uri()
    raw = small_simulated(
        name="tracked",
        space={"budgets": [1e6, 2e7], "seeds": 2},
        refine={"pairs": [[6, 12]], "max_seeds": 4, "max_rounds": 0},
        trackers={"log_to": ["mlflow"], "mlflow_uri": uri, "project": "depths"},
    )
    wandb_home = {
        f"WANDB_{key}": str(tmp / f"wandb-{key.lower()}")
        for key in ("DIR", "DATA_DIR", "CACHE_DIR", "CONFIG_DIR")
    }
    env = driver_env() | wandb_home | {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    env.pop("MLFLOW_TRACKING_URI", None)
    done = subprocess.run(
        run_command(write_spec(raw), tmp / "runs", "--log-to", "wandb"),
        capture_output=True,
        text=True,
        env=env,
        timeout=800,
    )
    assert done.returncode == 0, done.stderr
    trials = pd.read_parquet(tmp / "runs" / "tracked" / "trials.parquet")
    with mock.patch.dict("os.environ", {"MLFLOW_ALLOW_FILE_STORE": "true"}):  # MLflow 3 asks
        mlflow = mlflow_runs(uri, "depths")
    return done, trials, wandb_runs(wandb_home["WANDB_DIR"]), mlflow


def trial_runs(runs: list[dict], trials: pd.DataFrame) -> list[dict]:
    names = {f"L{r.depth}_w{r.width}_s{r.seed}_{r.trial_id[:6]}" for r in trials.itertuples()}
    return [run for run in runs if run["name"] in names]


def test_wandb_has_a_run_per_trial_grouped_by_stage_pair_and_cell(tracked):
    done, trials, runs, _ = tracked
    assert "logging the refine decisions and the fit to wandb, mlflow" in done.stderr
    per_trial = trial_runs(runs, trials)
    assert len(per_trial) == len(trials) == 16  # every trial once, none twice
    assert {run["project"] for run in runs} == {"depths"}
    groups = Counter(run["group"] for run in per_trial)
    grid = {g: n for g, n in groups.items() if g.startswith("grid/")}
    assert len(grid) == 4 and set(grid.values()) == {2}  # the 2 seeds of each cell together
    refine = {g: n for g, n in groups.items() if g.startswith("refine/6-12/L")}
    assert (trials.stage == "refine").sum() == 8 and set(refine.values()) == {2}
    assert {g.rsplit("/", 1)[1] for g in refine} == {g.split("/")[1] for g in grid}  # same cells
    for run in per_trial:
        assert run["job_type"] == run["group"].split("/")[0]
        assert {"val/loss", "train/loss", "tokens"} <= run["history"]  # Tune's reports


def test_wandb_has_the_pairs_decisions_and_the_fit_with_its_files(tracked):
    _, trials, runs, _ = tracked
    others = {run["name"]: run for run in runs if run not in trial_runs(runs, trials)}
    assert set(others) == {"refine/6-12/decisions", "fit"}
    decisions = others["refine/6-12/decisions"]
    assert decisions["group"] == "refine/6-12" and decisions["job_type"] == "refine"
    assert {"delta", "n"} <= decisions["history"]  # one step per paired Δ
    assert {"status", "statement", "n_star"} <= decisions["summary"]
    fit = others["fit"]
    assert fit["artifacts"] == [("fit", "fit", FIT_FILES)]
    assert "status" in fit["summary"]


def test_mlflow_has_the_same_runs_tagged_by_group(tracked):
    _, trials, _, runs = tracked
    by_name = {run["name"]: run for run in runs}
    per_trial = trial_runs(runs, trials)
    assert len(per_trial) == len(trials) and len(runs) == len(trials) + 2
    assert all(run["status"] == "FINISHED" for run in runs)
    pairs = Counter(run["tags"].get("dwtune.pair", "") for run in per_trial)
    assert pairs == Counter({"": 8, "6-12": 8})
    seeds_per_cell = Counter(run["tags"]["dwtune.group"] for run in per_trial)
    assert sorted(seeds_per_cell.values()) == [2] * 8  # 4 grid cells, 4 refine cells
    some = per_trial[0]
    assert {"depth", "width", "seed", "budget"} <= set(some["params"])
    assert "val/loss" in some["metrics"]
    decisions = by_name["refine/6-12/decisions"]
    assert decisions["tags"]["dwtune.status"] == "bracketed"
    assert "delta" in decisions["metrics"]
    assert by_name["fit"]["artifacts"] == FIT_FILES
