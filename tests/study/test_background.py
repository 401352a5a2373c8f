"""The study's background writes: in order, off the caller's thread, failures raised in it."""

from __future__ import annotations

import threading

import pytest

from dwtune.core.errors import InputError
from dwtune.study.background import Background


def test_writes_run_in_the_order_they_came_on_another_thread():
    background = Background()
    done: list[tuple[int, str]] = []
    for i in range(50):
        background.submit(lambda i=i: done.append((i, threading.current_thread().name)))
    background.close()
    assert [i for i, _ in done] == list(range(50))
    assert {name for _, name in done} == {"dwtune-writes"}


def test_a_failed_write_is_raised_in_the_callers_thread_and_stops_later_writes():
    background = Background()
    done: list[int] = []
    gate = threading.Event()
    background.submit(gate.wait)  # holds the worker until every write below is queued
    background.submit(lambda: done.append(1))
    background.submit(_full_disk)
    background.submit(lambda: done.append(2))
    gate.set()
    with pytest.raises(InputError, match="No space left"):
        background.drain()
    assert done == [1]
    background.submit(lambda: done.append(3))  # the run is stopping: nothing more is written
    background.close()
    assert done == [1]


def test_a_failure_surfaces_at_the_next_submit():
    background = Background()
    background.submit(_full_disk)
    background._queue.join()  # the failed write has run
    with pytest.raises(InputError, match="No space left"):
        background.submit(lambda: None)
    background.close()


def _full_disk() -> None:
    raise InputError("tb/x: No space left on device; free disk space")
