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
# A stand-in driver: starts the watcher and a child (Ray's agents in a real driver), prints the
# child's pid, then says done on a line from stdin or waits to be killed.
DRIVER = textwrap.dedent(
    """
    import subprocess, sys
    from dwtune.study.runners.ray_tune.reaper import Reaper
    watcher = Reaper()
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    child = subprocess.Popen(sleep, stdout=subprocess.DEVNULL)
    print(child.pid, flush=True)
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


def _driver() -> tuple[subprocess.Popen, int]:
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    child = int(driver.stdout.readline())
    time.sleep(2 * reaper.SNAPSHOT_EVERY_S)  # the watcher has listed the child
    return driver, child


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc (Linux)")
def test_a_killed_driver_takes_its_processes_with_it():
    driver, child = _driver()
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    gone = _gone_within(child, 5.0)
    if not gone:
        os.kill(child, signal.SIGKILL)
    assert gone


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc (Linux)")
def test_a_driver_that_says_done_leaves_its_processes_alone():
    driver, child = _driver()
    driver.communicate("\n", timeout=30)
    assert driver.returncode == 0
    time.sleep(2 * reaper.SNAPSHOT_EVERY_S)
    assert _alive(child)
    os.kill(child, signal.SIGKILL)


def test_descendants_follow_the_tree_below_a_root():
    table = {1: (0, 10), 5: (1, 11), 6: (5, 12), 7: (5, 13), 8: (1, 14), 9: (7, 15)}
    assert reaper.descendants(5, table) == {6: 12, 7: 13, 9: 15}
