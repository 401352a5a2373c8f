"""The embedded Ray of a local study requires a random token.

That it listens on loopback only: tests/commands/test_run_cli.py, which reads the listeners of
the `dwtune run` it shares with its run-command test (one Ray start, not one per test file).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dwtune.study.runners.ray_tune import embedded_ray

pytestmark = pytest.mark.ray


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
    # ray.init retries a refused GCS connection once a second, 20 times by default: a wrong
    # token was refused 20 times over ~20 s. The GCS is up, so a right token joins at the first.
    env["RAY_NUM_REDIS_GET_RETRIES"] = "3"
    if token is not None:
        env[embedded_ray.AUTH_TOKEN_ENV] = token
    code = f"import ray; ray.init(address={gcs!r}, log_to_driver=False); print('joined')"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    return done.returncode == 0 and "joined" in done.stdout
