"""The TCP listening sockets of a process tree, sampled from /proc while a driver runs.

Other engineers' and tests' Ray instances may run on this machine at the same time, so the
listeners looked at are those of one driver's own processes: the driver and every process below
it (GCS, raylet, agents, workers)."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import time
from pathlib import Path

from tests.helpers.processes import Processes

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


def is_loopback(address: str) -> bool:
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


def watch(driver: subprocess.Popen) -> tuple[set, list[str]]:
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
