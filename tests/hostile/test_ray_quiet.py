"""Ray's failures, said in one short line: a cluster that refuses the token, a killed trial
worker; and a killed driver leaves nothing of its local Ray running. Each driver is a
subprocess, so its whole console (what Ray's C++ code prints too) is read."""

from __future__ import annotations

import contextlib
import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import pandas as pd
import pytest
import yaml
from ray.core.generated import gcs_service_pb2_grpc

from dwtune.storage.store import ExperimentStore
from tests.helpers.hostile_experiment import BASE, base_raw
from tests.helpers.processes import Processes

pytestmark = [pytest.mark.hostile, pytest.mark.slow]
WAIT_S = 240
TRIAL_PROCESS = "ray::ImplicitFunc"  # Ray's process title of a Tune function trial
# Seconds a killed driver's processes get to exit: its local Ray's agents once waited up to a
# minute on the dead GCS; now a watcher kills them at once.
EXIT_S = 5.0
GRID = 8  # 2 depths x 4 budgets x 1 seed


def _env() -> dict:
    unset = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
    return {k: v for k, v in os.environ.items() if k not in unset}


def _spec(tmp_path: Path, **resources) -> Path:
    raw = base_raw()
    raw["space"]["depths"] = [6, 12]
    raw["simulated"] = {**raw["simulated"], "seconds_per_step": 0.01}  # ~2 s per trial
    raw["resources"] = {**raw["resources"], **resources}
    path = tmp_path / "quiet.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _command(spec: Path, storage: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "dwtune", "run", str(spec), "--storage", str(storage), *extra]


class _GcsRefusingTokens(gcs_service_pb2_grpc.NodeInfoGcsServiceServicer):
    """A GCS as a token-authenticated Ray head answers a client without its token."""

    def GetClusterId(self, request, context):
        context.abort(
            grpc.StatusCode.UNAUTHENTICATED,
            "InvalidAuthToken: Authentication token is missing or incorrect",
        )


@pytest.fixture
def head_requiring_a_token():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    gcs_service_pb2_grpc.add_NodeInfoGcsServiceServicer_to_server(_GcsRefusingTokens(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(grace=None)


def test_an_address_that_refuses_the_token_is_one_line_naming_it(tmp_path, head_requiring_a_token):
    done = subprocess.run(
        _command(_spec(tmp_path), tmp_path / "exp", "--address", head_requiring_a_token),
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert (done.returncode, len(lines)) == (2, 1), lines  # ray.init would warn once a second
    assert lines[0].startswith(f"dwtune run: error: --address {head_requiring_a_token}: ")
    assert "RAY_AUTH_TOKEN" in lines[0]
    assert not list((tmp_path / "exp" / BASE["name"] / "trials").glob("*.json"))


@pytest.fixture
def http_server():
    """A plain HTTP server on loopback: it answers, but not as Ray."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def silent_listener():
    """A port that accepts connections and never says a word."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield f"127.0.0.1:{listener.getsockname()[1]}"


def _refused_at_once(tmp_path: Path, extra: list[str], env: dict) -> tuple[str, float]:
    """The one line a driver pointed at ``address`` ends with, and its seconds."""
    start = time.monotonic()
    done = subprocess.run(
        _command(_spec(tmp_path), tmp_path / "exp", "--grid-only", *extra),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,  # Ray itself dials a non-Ray address for ever
    )
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert (done.returncode, len(lines)) == (2, 1), lines
    assert not list((tmp_path / "exp" / BASE["name"] / "trials").glob("*.json"))
    return lines[0], time.monotonic() - start


def test_an_http_server_as_address_is_one_line_naming_it(tmp_path, http_server):
    line, _ = _refused_at_once(tmp_path, ["--address", http_server], _env())
    assert line.startswith(f"dwtune run: error: --address {http_server}: not a Ray cluster (")


def test_an_http_server_as_ray_address_is_one_line_naming_it(tmp_path, http_server):
    line, _ = _refused_at_once(tmp_path, [], {**_env(), "RAY_ADDRESS": http_server})
    assert line.startswith(f"dwtune run: error: RAY_ADDRESS {http_server}: not a Ray cluster (")


def test_a_silent_listener_as_address_is_one_line_naming_it(tmp_path, silent_listener):
    line, _ = _refused_at_once(tmp_path, ["--address", silent_listener], _env())
    assert line.startswith(f"dwtune run: error: --address {silent_listener}: not a Ray cluster")
    assert "no answer" in line


class _Console:
    """A driver's stderr, read line by line as it comes (a thread drains the pipe)."""

    def __init__(self, driver: subprocess.Popen):
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(driver,), daemon=True)
        self._thread.start()

    def _read(self, driver: subprocess.Popen) -> None:
        for line in driver.stderr:
            self.lines.append(line.rstrip("\n"))

    def has(self, text: str) -> bool:
        return any(text in line for line in self.lines)


def _wait(condition, driver: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert driver.poll() is None, f"the driver ended before: {what}"
        assert time.monotonic() < deadline, f"never reached: {what}"
        time.sleep(0.05)


def _left_running(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + EXIT_S
    while any(Processes.alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in pids if Processes.alive(p)]
    for pid in left:  # the test's own cleanup: these are this test's processes
        os.kill(pid, signal.SIGKILL)
    return left


@pytest.mark.ray
def test_a_killed_worker_is_one_short_line_and_a_killed_driver_leaves_nothing(tmp_path):
    spec, storage = _spec(tmp_path, retries=1), tmp_path / "exp"
    store = ExperimentStore(storage / BASE["name"])
    driver = subprocess.Popen(
        _command(spec, storage, "--grid-only"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    console = _Console(driver)

    # Killed once it has reported (a checkpoint is there): killed while Ray still starts it,
    # the trial's actor "never ran", which Ray says in another, short, line.
    def reported_and_running() -> list[int]:
        reported = list(storage.glob("*/train/*/state-*"))  # its kept checkpoint
        return Processes.children_named(TRIAL_PROCESS, driver.pid) if reported else []

    _wait(reported_and_running, driver, "a trial that has reported")
    os.kill(reported_and_running()[0], signal.SIGKILL)
    _wait(lambda: console.has("attempt 1 failed"), driver, "the retry line")
    _wait(lambda: len(list(store.trials_dir.glob("*.json"))) >= 2, driver, "two records")
    pids = Processes.descendants({driver.pid}, Processes.table())
    driver.send_signal(signal.SIGKILL)
    stdout, _ = driver.communicate(timeout=30)
    assert _left_running(pids) == []
    # Ray prints the errors its raylet publishes to stdout: the worker's death (1,071
    # characters) is said by dwtune's retry line alone
    assert "A worker died" not in stdout
    assert max((len(line) for line in stdout.splitlines()), default=0) < 250, stdout

    retry = next(line for line in console.lines if "attempt 1 failed" in line)
    assert retry.endswith(
        ": attempt 1 failed (its worker process died: killed by a signal or out of memory, or "
        "it crashed); retrying"
    )
    assert max(len(line) for line in console.lines) < 250, console.lines
    done = subprocess.run(
        _command(spec, storage, "--grid-only"), capture_output=True, text=True, env=_env()
    )
    assert done.returncode == 0, done.stderr[-3000:]
    trials = pd.read_parquet(store.root / "trials.parquet")
    assert len(trials) == trials.trial_id.nunique() == GRID
    assert set(trials.status) == {"finished"}


@pytest.mark.ray
def test_a_working_directory_removed_during_a_run_loses_nothing(tmp_path):
    """Tune resolved paths against the working directory: removed mid-run, the run ended in
    a traceback after training, without trials.parquet."""
    spec, storage, cwd = _spec(tmp_path), tmp_path / "exp", tmp_path / "cwd"
    cwd.mkdir()
    store = ExperimentStore(storage / BASE["name"])
    driver = subprocess.Popen(
        _command(spec, storage, "--grid-only"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=cwd,
    )
    console = _Console(driver)
    _wait(lambda: len(list(store.trials_dir.glob("*.json"))) >= 2, driver, "two records")
    cwd.rmdir()
    driver.wait(timeout=WAIT_S)
    assert driver.returncode == 0, console.lines[-5:]
    assert not any("Traceback" in line for line in console.lines)
    trials = pd.read_parquet(store.root / "trials.parquet")
    assert len(trials) == trials.trial_id.nunique() == GRID


# The issue asks that no process of a killed driver's Ray outlives it: a short grace for the
# kills to land, not a time the test measures.
GRACE_S = 3.0
TOKEN_VARIABLE = b"RAY_AUTH_TOKEN="  # the embedded instance's, random for each driver
WORKER_SCRIPTS = "ray/_private/workers/"  # a trial worker's command line while it starts


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # exited, or another user's
        return b""


def _token_entry(pids: list[int]) -> bytes | None:
    """``RAY_AUTH_TOKEN=...`` as the driver's Ray processes carry it (its GCS, say)."""
    for pid in pids:
        for entry in _environ(pid).split(b"\0"):
            if entry.startswith(TOKEN_VARIABLE) and len(entry) > len(TOKEN_VARIABLE):
                return entry
    return None


def _carrying(entry: bytes) -> set[int]:
    return {
        pid
        for pid in Processes.table()
        if entry in _environ(pid).split(b"\0") and Processes.alive(pid)
    }


@pytest.mark.ray
def test_a_driver_killed_as_the_refine_stage_starts_leaves_no_process_of_its_ray(tmp_path):
    """Killed as the refine stage's first Tune run starts its trial workers: a worker still
    starting (not yet listed by the reaper, orphaned by the dead raylet) lived on 15 s and
    more. Every process below the driver, and every one carrying its Ray's token, is gone."""
    spec, storage = _spec(tmp_path), tmp_path / "exp"
    store = ExperimentStore(storage / BASE["name"])
    driver = subprocess.Popen(
        _command(spec, storage),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_env(),
    )
    _wait(lambda: len(list(store.trials_dir.glob("*.json"))) >= GRID, driver, "the grid's records")
    seen = set(Processes.descendants({driver.pid}, Processes.table()))

    def starting_worker_or_refine_record() -> bool:
        table = Processes.table()
        below = set(Processes.descendants({driver.pid}, table))
        fresh = [p for p in below - seen if WORKER_SCRIPTS in table[p][1]]
        seen.update(below)
        return bool(fresh) or len(list(store.trials_dir.glob("*.json"))) > GRID

    _wait(starting_worker_or_refine_record, driver, "a refine worker starting")
    table = Processes.table()
    pids = [p for p in Processes.descendants({driver.pid}, table) if p != driver.pid]
    entry = _token_entry(pids)
    driver.send_signal(signal.SIGKILL)
    driver.wait(timeout=30)
    assert entry is not None, [table[p][1][:80] for p in pids]
    deadline = time.monotonic() + GRACE_S
    left = set()
    while time.monotonic() < deadline:
        now = Processes.table()
        same = {p for p in pids if Processes.alive(p) and now.get(p, (0, ""))[1] == table[p][1]}
        left = same | _carrying(entry)
        if not left:
            break
        time.sleep(0.1)
    names = {p: Processes.table().get(p, (0, "?"))[1][:100] for p in left}
    for pid in left:  # the test's own cleanup: these are this test's driver's processes
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not left, names
