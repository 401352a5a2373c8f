"""`dwtune run` as a user runs it, in its own process (its own local Ray): start it, wait for
its records, stop it, and check that nothing it started outlives it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dwtune.storage.store import ExperimentStore
from tests.helpers.processes import Processes

WAIT_S = 120


def driver_env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}


def run_command(spec: Path, storage: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "dwtune", "run", str(spec), "--storage", str(storage), *extra]


def run_driver(spec: Path, storage: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        run_command(spec, storage, *extra),
        capture_output=True,
        text=True,
        env=driver_env(),
        timeout=300,
    )


def _terminal_sigint() -> None:
    """In the child: Ctrl-C handled as in a terminal's foreground job, even when the test run
    itself is a background job (which starts with SIGINT ignored, and children inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_driver(spec: Path, storage: Path) -> subprocess.Popen:
    return subprocess.Popen(
        run_command(spec, storage, "--grid-only"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=driver_env(),
        preexec_fn=_terminal_sigint,
    )


def wait_for_records(store: ExperimentStore, count: int, driver: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT_S
    while len(list(store.trials_dir.glob("*.json"))) < count:
        assert driver.poll() is None, driver.communicate()
        assert time.monotonic() < deadline, "no trial finished in time"
        time.sleep(0.1)


def trials_snapshot(store) -> dict:
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in store.trials_dir.iterdir()}


# Ray's node agents outlive a SIGKILLed driver for a while (they retry the dead GCS before
# exiting); everything that computes or holds memory (GCS, raylet, trial workers) must not.
SLOW_TO_EXIT = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")


def leftovers(pids: list[int], table: dict) -> list[str]:
    """Wait for the driver's processes to exit; kill (by pid) and name any that did not."""
    deadline = time.monotonic() + WAIT_S / 4
    while any(Processes.alive(p) for p in pids) and time.monotonic() < deadline:
        if all(table[p][1].startswith(SLOW_TO_EXIT) for p in pids if Processes.alive(p)):
            break
        time.sleep(0.2)
    now = Processes.table()
    # Same command line: still the process we saw (a pid is reused only after it exited).
    left = [p for p in pids if Processes.alive(p) and now.get(p, (0, ""))[1] == table[p][1]]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return [table[p][1].split()[0] for p in left if not table[p][1].startswith(SLOW_TO_EXIT)]
