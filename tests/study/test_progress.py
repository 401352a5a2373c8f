"""The study's progress display: plain lines off a terminal, cropped rows on one, SIMULATED
first, one ETA for the whole study, and -q / -v."""

from __future__ import annotations

import dataclasses
import io
import math
import re
from pathlib import Path

import pytest
import yaml

from dwtune.core import vocabulary
from dwtune.core.records import grid_requests, record_from_result
from dwtune.core.spec import load_spec, spec_from_dict
from dwtune.study.progress import QUIET, VERBOSE, StudyProgress, logging_to

SIMULATED_SPEC = Path(__file__).resolve().parents[2] / "search_spaces" / "simulated.yaml"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _drive(progress: StudyProgress, spec) -> None:
    """A study's events: grid trials (one failed), then a refine pair's rounds and the end."""
    progress.study(spec)
    progress.stage("grid")
    requests = grid_requests(spec)
    progress.begin("grid", requests, [])
    curve = [{vocabulary.STEP: 100, vocabulary.VAL_LOSS: 3.0}]
    for i, request in enumerate(requests):
        progress.trial_started(request)
        status = vocabulary.STATUS_FAILED if i == 1 else vocabulary.STATUS_FINISHED
        record = record_from_result(request, spec, curve, status, 0.5, error="boom" * (i == 1))
        progress.trial_finished(request, record)
    progress.stage("refine")
    label = "-".join(map(str, spec.refine.pairs[0]))
    progress.pair(label, 1, 3.2, "bisect")
    progress.pair(label, 2, 1.04, "bracketed", done=True)
    progress.stage("fit", "fitting the law")
    progress.close()


def _raw() -> dict:
    return yaml.safe_load(SIMULATED_SPEC.read_text())


def test_off_a_terminal_the_display_is_plain_lines_with_simulated_first():
    spec = load_spec(SIMULATED_SPEC)
    out = io.StringIO()
    _drive(StudyProgress(out, interval_s=0.0), spec)
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert vocabulary.SIMULATED_LABEL in lines[0]
    assert any(line.startswith("[grid] ") and "trials done" in line for line in lines)
    assert any("failed: boom" in line for line in lines)
    assert "fitting the law" in lines
    assert not any(": val/loss" in line for line in lines)  # a trial's line: --verbose only


def test_on_a_terminal_no_row_is_wider_than_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    raw = _raw()
    raw["name"] = "a-study-name-long-enough-to-run-past-eighty-columns-on-its-own-" + "x" * 20
    spec = spec_from_dict(raw)
    out = Terminal()
    progress = StudyProgress(out, interval_s=0.0)
    _drive(progress, spec)
    shown = ANSI.sub("", out.getvalue())
    rows = [row for part in shown.split("\n") for row in part.split("\r") if row]
    assert vocabulary.SIMULATED_LABEL in rows[0]
    display = [r for r in rows if r.startswith("dwtune ") or r.startswith("trials ")]
    assert display and all(len(r) <= 80 for r in display)
    assert any("bracket ×1.04" in r and "bracketed" in r for r in rows)


def test_the_eta_covers_the_refine_rounds_still_to_come():
    spec = load_spec(SIMULATED_SPEC)
    progress = StudyProgress(io.StringIO(), interval_s=0.0)
    progress.study(spec)
    requests = grid_requests(spec)
    progress.begin("grid", requests, [])
    curve = [{vocabulary.STEP: 100, vocabulary.VAL_LOSS: 3.0}]
    for request in requests:
        progress.trial_started(request)
        record = record_from_result(request, spec, curve, vocabulary.STATUS_FINISHED, 0.5)
        progress.trial_finished(request, record)
    assert 0 < progress.eta_s() < math.inf  # the grid is done, the pairs are not
    for pair in spec.refine.pairs:
        progress.pair(f"{pair[0]}-{pair[1]}", 3, 1.05, "bracketed", done=True)
    assert progress.eta_s() == 0.0


def test_quiet_shows_warnings_only_and_verbose_every_trial():
    import logging

    spec = load_spec(SIMULATED_SPEC)
    quiet, verbose = io.StringIO(), io.StringIO()
    _drive(StudyProgress(quiet, interval_s=0.0, verbosity=QUIET), spec)
    progress = StudyProgress(verbose, interval_s=0.0, verbosity=VERBOSE)
    with logging_to(progress, VERBOSE):
        logging.getLogger("dwtune.study").debug("a diagnostic")
        _drive(progress, spec)
    assert quiet.getvalue().splitlines() == [
        line for line in quiet.getvalue().splitlines() if "failed: boom" in line
    ]
    assert quiet.getvalue()
    assert "a diagnostic" in verbose.getvalue()
    assert ": val/loss 3.0000" in verbose.getvalue()
    assert not logging.getLogger("dwtune").handlers  # removed after the block


def _asks(progress: StudyProgress, spec, label: str, count: int) -> None:
    """The pair ``label`` asks for ``count`` refine trainings more."""
    base = grid_requests(spec)[0]
    start = len(progress.asked.get(label, ()))
    progress.add(
        [
            dataclasses.replace(base, trial_id=f"{label}-{start + i}", stage="refine", pair=label)
            for i in range(count)
        ]
    )


def test_the_forecast_counts_refine_trainings_from_the_start_and_learns_from_finished_pairs():
    spec = load_spec(SIMULATED_SPEC)
    labels = [f"{a}-{b}" for a, b in spec.refine.pairs]
    progress = StudyProgress(io.StringIO(), interval_s=0.0)
    progress.study(spec)
    rounds_only = progress.refine_left()
    progress.forecast(dict.fromkeys(labels, (60, 60.0)) | {labels[0]: (40, 40.0)})
    assert progress.refine_left() == 40 + 5 * 60 != rounds_only
    _asks(progress, spec, labels[0], 10)
    assert progress.refine_left() == 30 + 5 * 60  # what a pair asked for is planned now
    _asks(progress, spec, labels[0], 10)
    progress.pair(labels[0], 4, 1.05, "bracketed", done=True)
    assert progress.refine_left() == 5 * 30  # it took half its forecast: so will the others
    _asks(progress, spec, labels[1], 35)
    assert progress.refine_left() == progress.per_round + 4 * 30  # past its forecast, not done
    for label in labels[1:]:
        progress.pair(label, 4, 1.05, "bracketed", done=True)
    assert progress.refine_left() == 0


def test_the_eta_runs_at_the_pace_of_the_recent_trials(monkeypatch):
    """20 grid trials a second apart, then 20 refine trials a tenth of a second apart: the
    rate is the last quarter's (10 a second), not the whole history's (under 2 a second)."""
    spec = load_spec(SIMULATED_SPEC)
    clock = [0.0]
    monkeypatch.setattr("dwtune.study.progress.time.monotonic", lambda: clock[0])
    progress = StudyProgress(io.StringIO(), interval_s=0.0)
    requests = grid_requests(spec)[:40]
    progress.begin("grid", requests, [])
    curve = [{vocabulary.STEP: 100, vocabulary.VAL_LOSS: 3.0}]
    for i, request in enumerate(requests):
        clock[0] += 1.0 if i < 20 else 0.1
        progress.trial_started(request)
        record = record_from_result(request, spec, curve, vocabulary.STATUS_FINISHED, 0.5)
        progress.trial_finished(request, record)
    progress.add(grid_requests(spec)[40:60])  # 20 trials left
    assert progress.eta_s() == pytest.approx(20 / 10.0)
