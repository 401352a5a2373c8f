"""The study's ETA: work counted in cost, running trials credited with what they have done
(dwtune.study.eta)."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest

from dwtune.core import vocabulary
from dwtune.core.records import grid_requests, record_from_result
from dwtune.core.spec import load_spec
from dwtune.study import eta
from dwtune.study.progress import StudyProgress

SIMULATED_SPEC = Path(__file__).resolve().parents[2] / "search_spaces" / "simulated.yaml"
CURVE = [{vocabulary.STEP: 100, vocabulary.VAL_LOSS: 3.0}]


class Clock:
    def __init__(self, monkeypatch):
        self.now = 0.0
        monkeypatch.setattr("dwtune.study.progress.time.monotonic", lambda: self.now)


def _finish(progress: StudyProgress, spec, request) -> None:
    record = record_from_result(request, spec, CURVE, vocabulary.STATUS_FINISHED, 1.0)
    progress.trial_finished(request, record)


def test_largest_first_on_two_slots_the_eta_is_the_time_really_left(monkeypatch):
    """Costs 4, 4, 2, 2, 1, 1, 1, 1 on two slots at one cost unit a second: the first two end
    at 4 s, the rest take 4 s more. Counting trials instead (2 done in 4 s, 6 left) says 12."""
    clock = Clock(monkeypatch)
    spec = load_spec(SIMULATED_SPEC)
    requests = grid_requests(spec)[:8]
    costs = dict(zip((r.trial_id for r in requests), (4, 4, 2, 2, 1, 1, 1, 1), strict=True))
    progress = StudyProgress(io.StringIO(), interval_s=0.0)
    progress.begin("grid", requests, [], {k: float(v) for k, v in costs.items()})
    first, second, third, fourth = requests[:4]
    progress.trial_started(first)
    progress.trial_started(second)
    clock.now = 4.0
    _finish(progress, spec, first)
    _finish(progress, spec, second)
    progress.trial_started(third)
    progress.trial_started(fourth)
    assert progress.eta_s() == pytest.approx(4.0)
    clock.now = 5.0  # halfway through the two trials of cost 2: credited with what they did
    assert progress.eta_s() == pytest.approx(3.0)


def test_a_trial_past_its_expected_time_still_counts_a_tenth_of_its_cost(monkeypatch):
    clock = Clock(monkeypatch)
    spec = load_spec(SIMULATED_SPEC)
    requests = grid_requests(spec)[:2]
    progress = StudyProgress(io.StringIO(), interval_s=0.0)
    progress.begin("grid", requests, [], {r.trial_id: 10.0 for r in requests})
    progress.trial_started(requests[0])
    clock.now = 10.0
    _finish(progress, spec, requests[0])
    progress.trial_started(requests[1])
    clock.now = 40.0  # three times its expected 10 s
    assert progress.eta_s() == pytest.approx((1 - eta.MOST_DONE) * 10.0)


def test_no_work_left_is_no_time_left_and_no_pace_is_no_estimate():
    assert eta.eta_s(0.0, 0.0) == 0.0
    assert eta.eta_s(1.0, 0.0) == math.inf
    assert eta.eta_s(6.0, 2.0) == pytest.approx(3.0)
