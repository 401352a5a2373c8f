"""Shared fixtures (small spec files written on demand) and the tiers' one hook: tests marked
``gpu`` are skipped where CUDA is missing, and the longest files are handed out first. Shared
helpers are in tests/helpers."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helpers.specs import small_simulated

# One intra-op thread in every test process and in every process it starts (drivers and Ray
# workers inherit it), set before anything imports torch (nothing above does): the tiers run
# two test processes on two cores, and torch's OpenMP threads spin while they wait, so
# oversubscribed they slowed a width-16 model's training step about 20-fold. A test about
# threads sets its own.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def write_spec(tmp_path_factory):
    """``write_spec(raw) -> Path`` of a YAML spec file holding ``raw``."""

    def write(raw: dict) -> Path:
        path = tmp_path_factory.mktemp("specs") / f"{raw['name']}.yaml"
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        return path

    return write


@pytest.fixture(scope="session")
def simulated_raw():
    """``simulated_raw(**sections) -> dict``: the small simulated study, adjusted."""
    return small_simulated


@pytest.fixture(scope="session")
def watched_run(write_spec, simulated_raw, tmp_path_factory):
    """`dwtune run` of the small study (about 1 s a trial) in its own process with its own Ray,
    the listening sockets of its process tree sampled while it ran:
    ``(storage, completed process, listeners, ss -ltnp lines)``. Every `dwtune run` starts Ray,
    so the tests that only read one such run share it; they are in one file (under
    ``--dist loadfile`` a session fixture runs once per worker that uses it)."""
    from tests.helpers.drivers import run_command
    from tests.helpers.listeners import watch

    storage = tmp_path_factory.mktemp("watched")
    spec = write_spec(simulated_raw(name="cli", simulated={"seconds_per_step": 0.002}))
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    out, err = storage / "stdout.txt", storage / "stderr.txt"  # files: a full pipe never blocks
    with out.open("w") as stdout, err.open("w") as stderr:
        driver = subprocess.Popen(run_command(spec, storage), env=env, stdout=stdout, stderr=stderr)
        seen, ss_lines = watch(driver)
        driver.wait(timeout=60)
    done = subprocess.CompletedProcess(
        driver.args, driver.returncode, out.read_text(), err.read_text()
    )
    return storage, done, seen, ss_lines


# The longest files of the slow tier (tens of seconds each: Ray instances, killed drivers,
# studies), put first in the collection. pytest-xdist 3.8 (`--dist loadfile`) then reorders the
# files by their number of tests, most first, and keeps this order only among files of equal
# count: the one-test cluster rehearsal still starts last (`--no-loadscope-reorder` would keep
# the collection order in both tiers; not adopted until a whole run has measured it).
_LONG_FILES_FIRST = (
    "tests/study/test_cluster_rehearsal.py",  # the longest
    "tests/study/test_ray_sharded.py",
    "tests/study/test_trackers_ray.py",
    "tests/hostile/test_kill_and_disk.py",
    "tests/commands/test_lr_search_cli.py",
    "tests/commands/test_run_cli.py",
    "tests/study/test_early_stop.py",
    "tests/hostile/test_ray_quiet.py",
    "tests/commands/test_bench.py",
    "tests/study/test_embedded_ray.py",
    "tests/commands/test_refine_cli.py",
    "tests/backends/test_model.py",
    "tests/study/test_pipeline.py",
)


@pytest.hookimpl(trylast=True)  # after -m has deselected: torch is imported only if needed
def pytest_collection_modifyitems(config, items):
    items.sort(key=_schedule_rank)  # stable: within a file, and among the rest, order is kept
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if gpu and not _cuda_available():
        for item in gpu:
            item.add_marker(pytest.mark.skip(reason="needs CUDA"))


def _schedule_rank(item) -> int:
    path = item.nodeid.split("::", 1)[0]
    if path in _LONG_FILES_FIRST:
        return _LONG_FILES_FIRST.index(path)
    return len(_LONG_FILES_FIRST)


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()
