"""The ETA's refine forecast comes from a child process: it delivers what the planner
estimates, and it never outlives the driver that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from dwtune.core.cost import relative_trial_cost
from dwtune.core.spec import spec_from_dict
from dwtune.study.cost_estimate import refine_estimate
from dwtune.study.forecast import RefineForecast
from tests.helpers.processes import Processes
from tests.helpers.specs import small_simulated

ROOT = Path(__file__).resolve().parents[2]
FORECAST = f"{sys.executable} -m dwtune.study.forecast"  # the child's command line
RAW = small_simulated(
    name="forecast",
    space={"depths": [6, 12], "budgets": {"min": 1e6, "max": 1e9, "num": 4}, "seeds": 1},
    refine={"pairs": [[6, 12]], "seeds": 1, "max_seeds": 2, "max_rounds": 3},
)


def test_the_child_delivers_the_planners_refine_trainings_and_their_cost_per_pair():
    spec = spec_from_dict(RAW)
    delivered: list[dict[str, tuple[int, float]]] = []
    arrived = threading.Event()

    def deliver(forecast: dict[str, tuple[int, float]]) -> None:
        delivered.append(forecast)
        arrived.set()

    forecast = RefineForecast(spec, deliver)
    try:
        assert arrived.wait(120), "no forecast within 120 s"
    finally:
        forecast.stop()
    expected: dict[str, tuple[int, float]] = {}
    for request in (r for batch in refine_estimate(spec).rounds for r in batch):
        count, cost = expected.get(request.pair, (0, 0.0))
        cost += relative_trial_cost(spec.trainer, request.shape)
        expected[request.pair] = (count + 1, cost)
    assert delivered == [expected] and sum(count for count, _ in expected.values()) > 0


def test_a_killed_driver_takes_its_forecast_with_it(tmp_path):
    # a forecast with much to do: the driver is killed long before it is done
    raw = {**RAW, "space": {**RAW["space"], "depths": [6, 12, 18, 24]}}
    raw["refine"] = {**RAW["refine"], "pairs": [[6, 12], [12, 18], [18, 24]], "max_rounds": 8}
    script = textwrap.dedent(f"""
        import time
        from dwtune.core.spec import spec_from_dict
        from dwtune.study.forecast import RefineForecast
        RefineForecast(spec_from_dict({raw!r}), print)
        time.sleep(600)
        """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    driver = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not (children := Processes.children_named(FORECAST, driver.pid)):
            assert time.monotonic() < deadline, "the forecast never started"
            time.sleep(0.05)
        [child] = children
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        deadline = time.monotonic() + 10
        while Processes.alive(child):
            assert time.monotonic() < deadline, "the forecast outlived its driver by 10 s"
            time.sleep(0.05)
    finally:
        driver.kill()


def test_the_twin_refines_in_memory_and_decides_as_a_journal_backed_stage_does(tmp_path):
    from dwtune.core.records import grid_requests
    from dwtune.outputs.tensorboard import refine_board
    from dwtune.storage.store import ExperimentStore
    from dwtune.study.cost_estimate import simulated_twin
    from dwtune.study.journal import ScratchJournals, journal_path
    from dwtune.study.refine import run_refine
    from dwtune.study.runners.local import LocalRunner

    twin = simulated_twin(spec_from_dict(RAW))

    def refined(folder: Path, journals_of):
        store = ExperimentStore.for_spec(str(folder), twin)
        store.initialise(twin)
        runner = LocalRunner(twin, store)
        runner.run(grid_requests(twin))
        asked: list[str] = []

        def run(requests):
            asked.extend(r.trial_id for r in requests)
            return runner.run(requests)

        found = run_refine(twin, store, run, journals=journals_of(store))
        return store, asked, found

    kept, kept_asked, kept_found = refined(tmp_path / "journal", lambda store: None)
    scratch, scratch_asked, scratch_found = refined(tmp_path / "scratch", ScratchJournals)
    assert scratch_asked == kept_asked and len(kept_asked) > 0
    assert scratch_found == kept_found
    assert journal_path(kept).is_file() and not journal_path(scratch).exists()
    # nothing published: no decisions board beside the trainings' own runs
    assert not refine_board(scratch.root, "6-12", simulated=True).exists()
    assert refine_board(kept.root, "6-12", simulated=True).is_dir()
