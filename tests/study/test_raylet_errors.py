"""Errors Ray's raylet publishes reach the console as one short line, a worker's death not at all
(dwtune's own trial line says it)."""

from __future__ import annotations

from dwtune.study.runners.ray_tune.raylet_errors import MAX_CHARS, short_lines

WORKER_DIED = (
    "A worker died or was killed while executing a task by an unexpected system error. To "
    "troubleshoot the problem, check the logs for the dead worker. RayTask ID: ffff Worker ID: "
    + "0"
    * 56
    + " Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a "
    "connection error code 2. End of file. There are some potential root causes. (1) The "
    "process is killed by SIGKILL by OOM killer due to high memory usage. " * 3
)


def test_a_worker_death_is_left_to_the_trial_line():
    assert short_lines([WORKER_DIED]) == []


def test_another_error_is_its_first_line_cut():
    lines = short_lines(["x" * 1000, "second line"])
    assert len(lines) == 1 and len(lines[0]) == MAX_CHARS and lines[0].endswith("…")
    assert short_lines(["Out of disk on node 1.", "details"]) == ["Out of disk on node 1."]
