"""How the embedded Ray instance of a local study is kept private (no ray import here).

A local study starts its own Ray (GCS, raylet, dashboard agent, runtime-env agent, workers and
the driver's own gRPC server). Left to its defaults Ray 2.60 listens on every interface and on
the host's address, and a control plane anyone on the network can reach is remote code
execution. So the embedded instance:

* runs on the loopback address: ``_node_ip_address=127.0.0.1`` alone is not enough, because Ray
  rewrites a loopback node address to the host's address unless
  ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (Ray's single-machine mode; ``ray_tune`` also sets the
  driver's already-imported copy of that constant). Every Ray process then binds 127.0.0.1.
* requires a token: ``RAY_AUTH_MODE`` is left unset so that ``ray.init`` turns token mode on
  itself (and refreshes its cached config), and ``RAY_AUTH_TOKEN`` carries a random token made
  for this driver process; nothing is written to ``~/.ray/auth_token``.
* has no dashboard (``include_dashboard=False``).

Joining a cluster (``--address``) changes none of this: the cluster's own settings and the
token from the environment (``RAY_AUTH_MODE=token`` with ``RAY_AUTH_TOKEN`` or
``~/.ray/auth_token``) apply.
"""

from __future__ import annotations

import functools
import os
import secrets

LOOPBACK = "127.0.0.1"
SINGLE_MACHINE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
AUTH_MODE_ENV = "RAY_AUTH_MODE"
AUTH_TOKEN_ENV = "RAY_AUTH_TOKEN"
AUTH_TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
TOKEN_BYTES = 32  # 256 random bits, hex-encoded


@functools.cache
def session_token() -> str:
    """One random token per driver process: Ray caches the token it loads, so a second
    embedded instance in the same process must get the same one."""
    return secrets.token_hex(TOKEN_BYTES)


def environment() -> dict[str, str | None]:
    """Environment for starting the embedded instance; ``None`` means "unset it"."""
    return {
        SINGLE_MACHINE_ENV: "0",
        AUTH_MODE_ENV: None,  # unset: ray.init enables token mode for a new local cluster
        AUTH_TOKEN_ENV: session_token(),
        AUTH_TOKEN_PATH_ENV: None,  # the token above wins; never someone else's file
    }


def init_options() -> dict:
    """``ray.init`` keyword arguments that keep the embedded instance on loopback."""
    return {"_node_ip_address": LOOPBACK, "include_dashboard": False, "dashboard_host": LOOPBACK}


def set_env(values: dict[str, str | None]) -> None:
    """Set each variable in this process's environment; ``None`` unsets it."""
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
