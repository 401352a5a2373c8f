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


# A stand-in driver whose Ray started a process the watcher never saw below it (a worker still
# starting when the driver died, orphaned by its dead raylet): it carries the driver's token.
# A process with another driver's token is not this driver's. The token is set before the
# child it had before, which carries it too and is spared.
ORPHANING_DRIVER = textwrap.dedent(
    """
    import os, subprocess, sys
    from dwtune.study.runners.ray_tune.reaper import Reaper, TOKEN_ENV
    os.environ[TOKEN_ENV] = "ours"
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    before = subprocess.Popen(sleep, stdout=subprocess.DEVNULL)
    detach = (
        "import subprocess, sys; "
        "print(subprocess.Popen(sys.argv[1:], start_new_session=True, "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)"
    )
    def orphan(env):
        out = subprocess.run([sys.executable, "-c", detach, *sleep], env=env,
                             capture_output=True, text=True, check=True).stdout
        return int(out)
    ours = orphan(dict(os.environ))
    theirs = orphan({**os.environ, TOKEN_ENV: "another driver's"})
    watcher = Reaper()
    print(before.pid, ours, theirs, flush=True)
    sys.stdin.readline()
    """
)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc (Linux)")
def test_a_killed_driver_takes_its_tokens_orphans_with_it_but_not_another_drivers():
    driver = subprocess.Popen(
        [sys.executable, "-c", ORPHANING_DRIVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    before, ours, theirs = (int(pid) for pid in driver.stdout.readline().split())
    time.sleep(2 * reaper.SNAPSHOT_EVERY_S)  # the watcher has started and looked
    assert reaper.descendants(driver.pid, reaper._processes()).keys().isdisjoint({ours, theirs})
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    gone = _gone_within(ours, 5.0)
    alive = [_alive(before), _alive(theirs)]
    for pid in (before, ours, theirs):
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    assert gone and alive == [True, True]


def test_carrying_finds_the_token_as_a_whole_variable(tmp_path, monkeypatch):
    environs = {
        1: b"A=1\0RAY_AUTH_TOKEN=abc\0",
        2: b"RAY_AUTH_TOKEN=abc\0",
        3: b"RAY_AUTH_TOKEN=abcd\0",
        4: b"XRAY_AUTH_TOKEN=abc\0",
        5: b"RAY_AUTH_TOKEN=abc",
    }
    monkeypatch.setattr(
        reaper,
        "Path",
        lambda path: type(
            "P", (), {"read_bytes": lambda self: environs[int(path.split("/")[2])]}
        )(),
    )
    table = {pid: (0, pid * 10) for pid in environs}
    assert reaper.carrying("abc", table) == {1: 10, 2: 20, 5: 50}
