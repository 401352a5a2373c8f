"""The embedded Ray of a local study listens on loopback only and requires a random token.

Other engineers' and tests' Ray instances may run on this machine at the same time, so the
listeners looked at are those of this study's own processes: the driver and every process
below it (GCS, raylet, agents, workers), found from /proc.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dwtune.study.runners.ray_tune import embedded_ray
from tests.helpers.processes import Processes

pytestmark = pytest.mark.ray

WAIT_S = 180


TCP_LISTEN = "0A"  # socket state in /proc/net/tcp


def _hex_address(text: str) -> str:
    """An address as /proc/net/tcp{,6} writes it (32-bit words, each little-endian)."""
    raw = bytes.fromhex(text)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def _listening_inodes() -> dict[str, tuple[str, int]]:
    """socket inode -> (address, port) of every listening TCP socket of this machine."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == TCP_LISTEN:
                address, port = fields[1].split(":")
                found[fields[9]] = (_hex_address(address), int(port, 16))
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    except OSError:  # exited while we looked
        pass
    return inodes


def _listeners(pids: set[int]) -> set[tuple[str, int, int]]:
    """(address, port, pid) of every TCP listening socket of ``pids``."""
    listening = _listening_inodes()
    return {
        (*listening[inode], pid)
        for pid in pids
        for inode in _socket_inodes(pid)
        if inode in listening
    }


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:127.0.0.1 from a dual-stack socket
    return (mapped or ip).is_loopback


def _ss_lines(pids: set[int]) -> list[str]:
    """``ss -ltnp`` lines of these processes, for the record (empty where ss is missing)."""
    try:
        out = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True).stdout
    except OSError:
        return []
    return [line for line in out.splitlines() if any(f"pid={p}," in line for p in pids)]


def _watch(driver: subprocess.Popen) -> tuple[set, list[str]]:
    """Listeners of the driver's process tree, sampled until the driver exits."""
    seen, ss_most, deadline = set(), [], time.monotonic() + WAIT_S
    while driver.poll() is None and time.monotonic() < deadline:
        pids = set(Processes.descendants({driver.pid}, Processes.table()))
        now = _listeners(pids)
        if len(now) > len(ss_most):
            ss_most = _ss_lines(pids) or ss_most
        seen |= now
        time.sleep(0.3)
    return seen, ss_most


def test_a_local_study_listens_on_loopback_only(write_spec, simulated_raw, tmp_path):
    spec = write_spec(simulated_raw(name="loopback", simulated={"seconds_per_step": 0.002}))
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    command = [sys.executable, "-m", "dwtune", "run", str(spec), "--storage", str(tmp_path)]
    driver = subprocess.Popen(
        [*command, "--grid-only"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    seen, ss_lines = _watch(driver)
    _, err = driver.communicate(timeout=60)
    assert driver.returncode == 0, err.decode()
    Path(tmp_path / "ss-ltnp.txt").write_text("\n".join(ss_lines))
    print("\n".join(["ss -ltnp during the study (its own processes):", *ss_lines]))
    ports = {port for _, port, _ in seen}
    assert len(ports) >= 4  # GCS, raylet, agents and workers were seen listening
    exposed = sorted(entry for entry in seen if not _is_loopback(entry[0]))
    assert exposed == []


def test_the_embedded_instance_refuses_a_client_without_its_token(simulated_raw, tmp_path):
    import ray

    from dwtune.core.spec import spec_from_dict
    from dwtune.storage.store import ExperimentStore
    from dwtune.study.runners.ray_tune import TuneRunner

    spec = spec_from_dict(simulated_raw(name="token"))
    store = ExperimentStore.for_spec(tmp_path, spec)
    assert not ray.is_initialized()
    with TuneRunner(spec, store):
        gcs = ray.get_runtime_context().gcs_address
        assert gcs.startswith(f"{embedded_ray.LOOPBACK}:")
        token = os.environ[embedded_ray.AUTH_TOKEN_ENV]
        outcomes = {
            name: _connect(gcs, value, tmp_path)
            for name, value in {"none": None, "wrong": "0" * 64, "right": token}.items()
        }
    assert outcomes == {"none": False, "wrong": False, "right": True}
    assert (
        embedded_ray.AUTH_TOKEN_ENV not in os.environ
        or os.environ[embedded_ray.AUTH_TOKEN_ENV] != token
    )  # the token does not outlive the runner in this process's environment


def _connect(gcs: str, token: str | None, home: Path) -> bool:
    """Whether a fresh process (own HOME: no ~/.ray/auth_token) can join ``gcs``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(home), RAY_AUTH_MODE="token")
    env[embedded_ray.SINGLE_MACHINE_ENV] = "0"  # keep 127.0.0.1 as it is, as the driver did
    if token is not None:
        env[embedded_ray.AUTH_TOKEN_ENV] = token
    code = f"import ray; ray.init(address={gcs!r}, log_to_driver=False); print('joined')"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    return done.returncode == 0 and "joined" in done.stdout
