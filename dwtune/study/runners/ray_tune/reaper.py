"""Ends what a killed driver's local Ray instance leaves running (Linux; no ray import here).

A SIGKILLed driver takes its GCS and raylet with it (Ray ties them to the driver), but the
raylet's two agents (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``) first try to tell the
dead GCS that their raylet died, and wait up to a minute for it. So the driver of a local
instance starts this small process as Ray starts: it keeps a list of the driver's descendants
(pid and start time, from ``/proc``), but those it had before, and reads a pipe from the
driver. ``done`` on the pipe (the driver shut Ray down itself) ends it quietly; the pipe
closing without it (the driver died) makes it SIGKILL every listed process still alive as the
same process, then end. Started in its own session, so a Ctrl-C in the terminal reaches the
driver, which shuts down in order, and not this.

A process the raylet started in the last snapshot interval is not listed yet: a trial worker
still starting (``setup_worker.py``, then ``default_worker.py``: seconds of imports under load)
when the driver died was orphaned with nothing to tell it, and lived on (15 s and more, seen
killed just as the refine stage started its workers). So at the driver's death every process
whose environment carries the embedded instance's token (``RAY_AUTH_TOKEN``, random for each
driver, inherited by everything its Ray starts) is killed too, until none is left. A process
that has set its title (``ray::...``) no longer shows its environment, but it had time to be
listed.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

SNAPSHOT_EVERY_S = 1.0  # processes started later than this before a kill: found by the token
DONE = b"done\n"
TOKEN_ENV = "RAY_AUTH_TOKEN"  # embedded_ray.AUTH_TOKEN_ENV (this module imports nothing of dwtune)
SWEEPS = 5  # a starting worker may start its child while we kill it: look again
SWEEP_PAUSE_S = 0.1


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start time in clock ticks) of every process, from /proc."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_bytes()
        except OSError:  # exited while we looked
            continue
        fields = stat.rsplit(b")", 1)[1].split()  # after the command name, which may hold spaces
        table[int(entry.name)] = (int(fields[1]), int(fields[19]))
    return table


def descendants(root: int, table: dict[int, tuple[int, int]]) -> dict[int, int]:
    """pid -> start time of every process below ``root``."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found: dict[int, int] = {}
    frontier = [root]
    while frontier:
        for child in children.get(frontier.pop(), ()):
            if child not in found:
                found[child] = table[child][1]
                frontier.append(child)
    return found


def kill_if_same(processes: dict[int, int]) -> None:
    """SIGKILL each listed process still running with the start time listed (a pid reused by
    an unrelated process since has another)."""
    now = _processes()
    for pid, started in processes.items():
        if now.get(pid, (0, -1))[1] == started:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def carrying(token: str, table: dict[int, tuple[int, int]]) -> dict[int, int]:
    """pid -> start time of every process whose environment holds ``RAY_AUTH_TOKEN=token``
    (another user's processes cannot be read, and are not Ray's of this driver)."""
    entry = b"\0" + f"{TOKEN_ENV}={token}".encode() + b"\0"
    found = {}
    for pid, (_, started) in table.items():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:  # exited, or not ours
            continue
        if entry in b"\0" + environ + b"\0":
            found[pid] = started
    return found


def sweep(listed: dict[int, int], token: str | None, spared: dict[int, int]) -> None:
    """The driver died: SIGKILL what was listed, then every process carrying the token (but
    this one and the spared) until none is left or SWEEPS rounds have passed."""
    kill_if_same(listed)
    if not token:  # a watcher started without one (not from an embedded instance's driver)
        return
    for _ in range(SWEEPS):
        found = carrying(token, _processes())
        found.pop(os.getpid(), None)
        found = {pid: started for pid, started in found.items() if spared.get(pid) != started}
        if not found:
            return
        kill_if_same(found)
        time.sleep(SWEEP_PAUSE_S)


def _refresh(listed: dict[int, int], driver: int, spared: dict[int, int]) -> dict[int, int]:
    """The listed processes still running, and the driver's descendants now but the spared.
    Listed ones are kept: once the driver has died its orphans are no longer below it."""
    table = _processes()
    alive = {
        pid: started for pid, started in listed.items() if table.get(pid, (0, -1))[1] == started
    }
    alive.update(descendants(driver, table))
    alive.pop(os.getpid(), None)
    return {pid: started for pid, started in alive.items() if spared.get(pid) != started}


def watch(driver: int, pipe: int, spared: dict[int, int], token: str | None = None) -> None:
    """List the driver's descendants (but ``spared``: those it had before Ray started) every
    SNAPSHOT_EVERY_S until the pipe says done (return) or closes (kill what was listed and
    what carries ``token``, the embedded instance's)."""
    listed: dict[int, int] = {}
    while True:
        listed = _refresh(listed, driver, spared)
        ready, _, _ = select.select([pipe], [], [], SNAPSHOT_EVERY_S)
        if not ready:
            continue
        message = os.read(pipe, len(DONE))
        if message == DONE:
            return
        if not message:  # closed without DONE: the driver died
            sweep(listed, token, spared)
            return


class Reaper:
    """The driver's side: start the watcher before Ray starts (the processes the driver has
    then, a notebook's for one, are spared); :meth:`stop` once Ray is shut down."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        if Path("/proc/self/stat").exists():
            spared = descendants(os.getpid(), _processes())
            self.process = subprocess.Popen(
                [sys.executable, "-m", __name__, str(os.getpid()), _format(spared)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,  # it says nothing; the driver's pipe is not held
                start_new_session=True,
            )

    def stop(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(OSError):
            self.process.stdin.write(DONE)
            self.process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)


def _format(processes: dict[int, int]) -> str:
    return ",".join(f"{pid}:{started}" for pid, started in processes.items())


def _parse(text: str) -> dict[int, int]:
    pairs = (item.split(":") for item in text.split(",") if item)
    return {int(pid): int(started) for pid, started in pairs}


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver handles Ctrl-C and then says done
    # the token comes through the environment the driver set for its Ray, never on the
    # command line (which every user can read)
    watch(int(sys.argv[1]), sys.stdin.fileno(), _parse(sys.argv[2]), os.environ.get(TOKEN_ENV))
