"""Checking and reaching ``--address`` (no ray import here: commands check the address before
anything, without starting Ray). What the nodes offer is ``ray_tune.resources``."""

from __future__ import annotations

import os
import re
import socket

from dwtune.core.errors import InputError

ADDRESS_ENV = "RAY_ADDRESS"
CONNECT_TIMEOUT_S = 5.0
NOT_A_CLUSTER_FIX = "start one with `ray start --head` or fix the address"
DEFAULT_GCS_PORT = 6379
MAX_PORT = 65535
# A host name or address: letters, digits, dots, dashes, underscores; IPv6 in brackets.
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]{1,253})$")


def parse_address(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``--address`` (``ray://`` prefix allowed); one line when malformed.
    ``auto`` and ``local`` are not addresses and are not passed here."""
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host:
        host, port = hostport, str(DEFAULT_GCS_PORT)
    if not (_HOST.match(host) and port.isdigit() and 0 < int(port) <= MAX_PORT):
        raise InputError(f"--address: got {address!r}; expected HOST:PORT such as 10.0.0.1:6379")
    return host.strip("[]"), int(port)


def check_address(address: str | None) -> None:
    """Refuse a malformed ``--address`` at once, even when nothing needs training."""
    if address not in (None, "", "local", "auto"):
        parse_address(address)


def given_address(address: str | None) -> tuple[str | None, str]:
    """The address a Ray driver joins (``--address``, else ``RAY_ADDRESS``; None: it starts
    a local instance) and where it came from, for the error lines."""
    if address:
        return address, "--address"
    return os.environ.get(ADDRESS_ENV) or None, ADDRESS_ENV


def check_answers(address: str | None) -> None:
    """Refuse, in seconds, an ``--address`` (else ``RAY_ADDRESS``) that does not answer as a
    Ray cluster accepting this process's token; nothing for a local instance or ``auto``.

    The study calls this as its first batch needs Ray, before importing the runner (Ray Tune,
    torch through tensorboardX): after those imports a refusal took 16 s under load, and it
    must come well within 15 s. Only the token check imports ray. A study whose trainings
    are all recorded dials nothing."""
    address, named = given_address(address)
    if address not in (None, "", "local", "auto"):
        check_joinable(address, named)


def check_joinable(address: str, named: str = "--address") -> None:
    """One line unless ``address`` (HOST:PORT or ``ray://``) is reachable and, for a GCS
    address, answers as a Ray cluster (``named``: where the address came from)."""
    probe(address, named)
    if "://" not in address:  # a GCS address; Ray Client (ray://) speaks another protocol
        # ray (about 2 s to import) only once the address is reachable at all
        from dwtune.study.runners.ray_tune.cluster_token import check_cluster

        check_cluster(address, named)


def probe(address: str, named: str = "--address") -> None:
    """A TCP connect to ``host:port``: fail in seconds, not after Ray's long retries.
    ``named``: where the address came from (``--address`` or ``RAY_ADDRESS``)."""
    host, port = parse_address(address)
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise InputError(
            f"{named}: cannot reach a Ray cluster at {address} ({exc.strerror or exc}); "
            f"{NOT_A_CLUSTER_FIX}"
        ) from None
