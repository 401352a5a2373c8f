"""A killed driver and a full disk, on real Ray: each rerun ends with the trial set of an
uninterrupted run (computed here in-process: the simulated backend is deterministic), none
trained twice. The SIGKILL helpers are in tests/helpers/drivers.py."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pandas as pd
import pytest
import yaml

from dwtune.backends import simulated
from dwtune.core.spec import spec_from_dict
from dwtune.storage.store import ExperimentStore
from dwtune.study.refine import refine_in_process
from tests.helpers.drivers import driver_env, leftovers, run_command, trials_snapshot
from tests.helpers.hostile_experiment import BASE, base_raw
from tests.helpers.processes import Processes

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.hostile]
WAIT_S = 240
GRID = 8  # grid trainings of the spec below: 2 depths x 4 budgets x 1 seed


def _spec(tmp_path: Path, seconds_per_step: float = 0.005) -> Path:
    raw = base_raw()
    raw["space"]["depths"] = [6, 12]  # the refined pair alone: 8 grid trainings, not 12
    raw["simulated"] = {**raw["simulated"], "seconds_per_step": seconds_per_step}
    path = tmp_path / "kill.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _uninterrupted_ids(tmp_path: Path, spec_path: Path) -> set[str]:
    spec = spec_from_dict(yaml.safe_load(spec_path.read_text()))
    store = ExperimentStore.for_spec(tmp_path / "reference", spec)
    # seconds_per_step paces the killed driver's trials (time to kill mid-run); an identity
    # and every decision depend on the losses alone, so the reference skips the sleeps (with
    # them, its 24 trainings slept ~24 s of each kill test).
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(simulated, "time", _NO_SLEEP)
        refine_in_process(spec, store)
    return {r.trial_id for r in store.records()}


_NO_SLEEP = types.SimpleNamespace(sleep=lambda _seconds: None, perf_counter=time.perf_counter)


def _kill_when(driver: subprocess.Popen, ready, what: str) -> list[str]:
    deadline = time.monotonic() + WAIT_S
    while not ready():
        assert driver.poll() is None, driver.communicate()
        assert time.monotonic() < deadline, f"never reached: {what}"
        time.sleep(0.05)
    table = Processes.table()
    pids = Processes.descendants({driver.pid}, table)
    driver.send_signal(signal.SIGKILL)
    driver.communicate(timeout=30)
    return leftovers(pids, table)


def _stages(store: ExperimentStore) -> list[str]:
    stages = []
    for path in store.trials_dir.glob("*.json"):
        with contextlib.suppress(OSError, ValueError):  # being written, or a directory
            stages.append(json.loads(path.read_text())["stage"])
    return stages


def _rerun_and_compare(spec, storage, store, expected: set[str], before: dict) -> None:
    done = subprocess.run(
        run_command(spec, storage), capture_output=True, text=True, env=driver_env(), timeout=600
    )
    assert done.returncode == 0, done.stderr
    after = trials_snapshot(store)
    assert {k: after[k] for k in before} == before  # nothing finished was trained again
    trials = pd.read_parquet(store.root / "trials.parquet")
    assert len(trials) == trials.trial_id.nunique()
    assert set(trials.trial_id) == expected == {r.trial_id for r in store.records()}


def _driver(spec: Path, storage: Path) -> subprocess.Popen:
    return subprocess.Popen(
        run_command(spec, storage), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=driver_env()
    )


def _kill_export_and_report(store: ExperimentStore) -> None:
    """Kill `dwtune export` and `dwtune report` each as it starts writing its files."""
    for command in ("export", "report"):
        marker = store.root / ("trials.parquet" if command == "export" else "report.md")
        stamp = marker.stat().st_mtime_ns
        driver = subprocess.Popen(
            [sys.executable, "-m", "dwtune", command, str(store.root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=driver_env(),
        )

        def writing(root=store.root, marker=marker, stamp=stamp) -> bool:
            return bool(list(root.glob(".*.tmp"))) or marker.stat().st_mtime_ns != stamp

        _kill_when(driver, writing, f"{command} writing")


def test_sigkill_in_the_grid_then_in_the_refine_stage_then_during_report(tmp_path):
    """One experiment killed at each stage in turn (each kill a fresh driver resuming the
    last one's work): every rerun keeps what finished, and the last one ends with the trial
    set of an uninterrupted run. One chain, not three experiments: each `dwtune run` from
    scratch costs a Ray start and the whole study (about 30 s here)."""
    spec = _spec(tmp_path)
    expected = _uninterrupted_ids(tmp_path, spec)
    store = ExperimentStore(tmp_path / "exp" / BASE["name"])

    grid = _driver(spec, tmp_path / "exp")
    left = _kill_when(grid, lambda: 2 <= len(_stages(store)) < GRID, "two grid records")
    assert left == []
    assert set(_stages(store)) == {"grid"}

    before = trials_snapshot(store)
    refine = _driver(spec, tmp_path / "exp")
    left = _kill_when(refine, lambda: "refine" in _stages(store), "a refine record")
    assert left == []
    assert len(_stages(store)) < len(expected)  # killed before the stage was done
    after = trials_snapshot(store)
    assert {k: after[k] for k in before} == before  # the grid's records were not redone

    _rerun_and_compare(spec, tmp_path / "exp", store, expected, after)
    finished = trials_snapshot(store)
    _kill_export_and_report(store)
    _rerun_and_compare(spec, tmp_path / "exp", store, expected, finished)
    for command in ("export", "report"):
        done = subprocess.run(
            [sys.executable, "-m", "dwtune", command, str(store.root)],
            capture_output=True,
            text=True,
            env=driver_env(),
            timeout=300,
        )
        assert done.returncode == 0, done.stderr


TMPFS_BYTES = 2 * 2**20
# The small simulated study fits in 2 MB; a filler leaves it this much, so the disk fills mid-run.
FREE_BYTES = 256 * 2**10


def _mount_tmpfs(path: Path) -> bool:
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(path)],
        capture_output=True,
    )
    return done.returncode == 0


def test_a_full_disk_is_one_clear_line_and_the_experiment_resumes(tmp_path):
    disk = tmp_path / "tmpfs"
    if not _mount_tmpfs(disk):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        spec = _spec(tmp_path, seconds_per_step=0.0)
        filler = disk / "filler"
        filler.write_bytes(b"\0" * (TMPFS_BYTES - FREE_BYTES))
        full = subprocess.run(
            run_command(spec, disk), capture_output=True, text=True, env=driver_env(), timeout=600
        )
        filler.unlink()
        kept = tmp_path / "kept"
        shutil.copytree(disk, kept, symlinks=True)
    finally:
        subprocess.run(["umount", str(disk)], check=False)
    assert full.returncode == 2, full.stderr[-3000:]
    last = full.stderr.strip().splitlines()[-1]
    assert "No space left on device" in last and "free disk space" in last, full.stderr[-3000:]
    assert "Traceback" not in full.stderr
    store = ExperimentStore(kept / BASE["name"])
    store.records()  # every record written is whole
    before = trials_snapshot(store)
    expected = _uninterrupted_ids(tmp_path, spec)
    _rerun_and_compare(spec, kept, store, expected, before)
