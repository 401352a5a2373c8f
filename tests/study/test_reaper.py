"""The watcher a local Ray driver starts: a killed driver's processes end with it, a driver that
says done leaves them alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from dwtune.study.runners.ray_tune import reaper

pytestmark = pytest.mark.hostile  # kills processes
# A stand-in driver: a child it had before (a notebook's), the watcher, a child started after
# it (Ray's agents in a real driver); prints both pids, then says done on a line from stdin or
# waits to be killed.
DRIVER = textwrap.dedent(
    """
    import subprocess, sys
    from dwtune.study.runners.ray_tune.reaper import Reaper
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    before = subprocess.Popen(sleep, stdout=subprocess.DEVNULL)
    watcher = Reaper()
    child = subprocess.Popen(sleep, stdout=subprocess.DEVNULL)
    print(before.pid, child.pid, flush=True)
    sys.stdin.readline()
    watcher.stop()
    """
)


def _alive(pid: int) -> bool:
    table = reaper._processes()
    if pid not in table:
        return False
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0] != "Z"


def _driver() -> tuple[subprocess.Popen, int, int]:
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    before, child = (int(pid) for pid in driver.stdout.readline().split())
    time.sleep(2 * reaper.SNAPSHOT_EVERY_S)  # the watcher has listed the child
    return driver, before, child


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc (Linux)")
def test_a_killed_driver_takes_what_it_started_with_it_but_not_what_it_had():
    driver, before, child = _driver()
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    gone = _gone_within(child, 5.0)
    spared = _alive(before)
    for pid in (before, child):
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    assert gone and spared


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc (Linux)")
def test_a_driver_that_says_done_leaves_its_processes_alone():
    driver, before, child = _driver()
    driver.communicate("\n", timeout=30)
    assert driver.returncode == 0
    time.sleep(2 * reaper.SNAPSHOT_EVERY_S)
    alive = [_alive(before), _alive(child)]
    for pid in (before, child):
        os.kill(pid, signal.SIGKILL)
    assert alive == [True, True]


def test_descendants_follow_the_tree_below_a_root():
    table = {1: (0, 10), 5: (1, 11), 6: (5, 12), 7: (5, 13), 8: (1, 14), 9: (7, 15)}
    assert reaper.descendants(5, table) == {6: 12, 7: 13, 9: 15}
