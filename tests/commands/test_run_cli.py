"""`dwtune run` end to end: console, loopback-only listeners, resume after SIGKILL and Ctrl-C,
bad input (exit 2)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from dwtune.cli import main
from dwtune.storage.store import ExperimentStore
from tests.helpers.drivers import (
    leftovers,
    run_driver,
    start_driver,
    trials_snapshot,
    wait_for_records,
)
from tests.helpers.listeners import is_loopback
from tests.helpers.processes import Processes


@pytest.fixture
def slow_study(write_spec, simulated_raw, tmp_path):
    """8 trials of ~2 s each, 4 at a time: a driver can be interrupted half way."""
    raw = simulated_raw(name="slow", simulated={"seconds_per_step": 0.005})
    return write_spec(raw), tmp_path, ExperimentStore(tmp_path / "slow")


# --------------------------------------------------------------------------- with Ray


@pytest.mark.ray
def test_run_trains_the_grid_exports_and_shows_progress(watched_run):
    storage, done, _, _ = watched_run  # shared with the listener test below
    assert done.returncode == 0, done.stderr
    root = storage / "cli"
    trials = pd.read_parquet(root / "trials.parquet")
    assert len(trials) == 8 and set(trials.status) == {"finished"}
    assert len(pd.read_parquet(root / "curves.parquet")) == 8 * 4
    assert len(list((root / "tb" / "grid").glob("L*_w*_s*-SIMULATED"))) == 8  # runs by stage
    assert "] 8/8 trials done, 0 running, 0 failed | " in done.stderr  # the last status line
    assert done.stderr.startswith("dwtune SIMULATED")  # the display's first line says so
    assert "TensorBoard: tensorboard --logdir" in done.stderr
    assert "Traceback" not in done.stderr and "Trial" not in done.stderr  # no Tune tables


@pytest.mark.ray
def test_a_local_study_listens_on_loopback_only(watched_run, tmp_path):
    """The embedded Ray's listeners, those of the study's own processes sampled while it ran
    (tests/helpers/listeners.py): on loopback only."""
    _, done, seen, ss_lines = watched_run
    assert done.returncode == 0, done.stderr
    Path(tmp_path / "ss-ltnp.txt").write_text("\n".join(ss_lines))
    print("\n".join(["ss -ltnp during the study (its own processes):", *ss_lines]))
    ports = {port for _, port, _ in seen}
    assert len(ports) >= 4  # GCS, raylet, agents and workers were seen listening
    exposed = sorted(entry for entry in seen if not is_loopback(entry[0]))
    assert exposed == []


def _signal_driver_after(study, records: int, sig: int, timeout: float):
    """Start `dwtune run`, send ``sig`` once ``records`` trials are recorded; return its exit
    code, stderr and the Ray processes it started that are still alive."""
    spec, storage, store = study
    driver = start_driver(spec, storage)
    wait_for_records(store, records, driver)
    table = Processes.table()
    ray_processes = Processes.descendants({driver.pid}, table)
    driver.send_signal(sig)
    _, err = driver.communicate(timeout=timeout)
    return driver.returncode, err, leftovers(ray_processes, table)


@pytest.mark.ray
@pytest.mark.slow
def test_a_killed_driver_resumes_without_repeating_finished_trials(slow_study):
    spec, storage, store = slow_study
    _, _, leftovers = _signal_driver_after(slow_study, 2, signal.SIGKILL, timeout=30)
    assert leftovers == []  # Ray's reaper stops what the driver started
    before = trials_snapshot(store)

    done = run_driver(spec, storage, "--grid-only")
    assert done.returncode == 0, done.stderr
    assert f"{len(before)} trial(s) already recorded" in done.stderr
    assert f"training {8 - len(before)} trial(s)" in done.stderr
    after = trials_snapshot(store)
    assert {k: after[k] for k in before} == before
    trials = pd.read_parquet(store.root / "trials.parquet")
    assert len(trials) == trials.trial_id.nunique() == 8
    assert set(trials.status) == {"finished"}


@pytest.mark.ray
def test_ctrl_c_keeps_finished_work_and_says_how_to_resume(slow_study):
    store = slow_study[2]
    returncode, err, leftovers = _signal_driver_after(slow_study, 1, signal.SIGINT, timeout=60)
    assert returncode == 130
    assert "interrupted" in err and "rerun the same command to resume" in err
    assert len(store.records()) >= 1 and all(r.completed for r in store.records())
    assert leftovers == []


@pytest.mark.ray
def test_a_trial_size_no_node_offers_exits_2_at_once(write_spec, simulated_raw, tmp_path):
    done = run_driver(write_spec(simulated_raw(name="gpu", resources={"gpu": 1})), tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip().splitlines()[-1]]
    assert "resources: each trial asks for cpu=0.5, gpu=1 but no node" in done.stderr
    assert not (tmp_path / "gpu" / "ray").exists()


def test_a_ctrl_c_swallowed_below_the_command_still_exits_130(
    write_spec, simulated_raw, tmp_path, monkeypatch, capsys
):
    """Ray and Tune catch a KeyboardInterrupt in places; the study may then end normally."""
    from dwtune.study.pipeline import Study

    def swallowing_run(self, storage, *args):
        self.store = ExperimentStore.for_spec(storage, self.spec)
        with contextlib.suppress(KeyboardInterrupt):  # as a library might
            signal.raise_signal(signal.SIGINT)
        return None

    monkeypatch.setattr(Study, "run", swallowing_run)
    # a background job starts with SIGINT ignored; this test needs the terminal's default
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert main(["run", str(write_spec(simulated_raw())), "--storage", str(tmp_path)]) == 130
        assert "interrupted" in capsys.readouterr().err
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_study_started_with_sigint_ignored_keeps_ignoring_it():
    """nohup or `&` without job control: a Ctrl-C in that terminal is not for the study."""
    from dwtune.study.interruption import catching_ctrl_c, interrupted

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with catching_ctrl_c():
            signal.raise_signal(signal.SIGINT)  # would raise KeyboardInterrupt if handled
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert not interrupted()
    finally:
        signal.signal(signal.SIGINT, previous)


# --------------------------------------------------------------------------- bad input (no Ray)


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_unwritable_storage_exits_2(write_spec, simulated_raw, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(["run", str(write_spec(simulated_raw())), "--storage", str(blocker / "x")]) == 2
    assert "pass a writable --storage" in _one_line_error(capsys)


@contextlib.contextmanager
def _read_only(folder: Path):
    """``folder`` unwritable: by its mode, or (as root, whom modes do not stop) by a read-only
    bind mount of it onto itself."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    mount = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if mount.returncode != 0:
        pytest.skip("running as root and cannot bind-mount a folder read-only here")
    try:
        remount = ["mount", "-o", "remount,ro,bind", str(folder)]
        if subprocess.run(remount, capture_output=True).returncode != 0:
            pytest.skip("running as root and cannot remount a folder read-only here")
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=False)


@pytest.mark.parametrize("folder", ["trials", "tb", "refine"])
def test_a_read_only_folder_of_the_experiment_exits_2_before_training(
    folder, write_spec, simulated_raw, tmp_path, capsys
):
    spec = write_spec(simulated_raw(name="ro"))
    (tmp_path / "ro" / folder).mkdir(parents=True)
    with _read_only(tmp_path / "ro" / folder):
        assert main(["run", str(spec), "--storage", str(tmp_path)]) == 2
    line = _one_line_error(capsys)
    assert f"storage {tmp_path / 'ro' / folder}: not writable" in line
    assert "make it writable" in line
    assert not (tmp_path / "ro" / "ray").exists()  # refused before Ray started


def test_a_cloud_uri_as_storage_exits_2(write_spec, simulated_raw, capsys):
    assert main(["run", str(write_spec(simulated_raw())), "--storage", "s3://bucket/x"]) == 2
    assert "expected a filesystem path" in _one_line_error(capsys)


def test_an_experiment_dir_with_a_different_spec_exits_2(
    write_spec, simulated_raw, tmp_path, capsys
):
    from dwtune.core.spec import load_spec

    ExperimentStore.for_spec(tmp_path, load_spec(write_spec(simulated_raw()))).initialise(
        load_spec(write_spec(simulated_raw()))
    )
    changed = write_spec(simulated_raw(train={"steps": 500}))
    assert main(["run", str(changed), "--storage", str(tmp_path)]) == 2
    assert "holds a different spec (changed: train.steps)" in _one_line_error(capsys)


def test_a_corrupt_trial_record_exits_2_before_ray_starts(
    write_spec, simulated_raw, tmp_path, capsys
):
    from dwtune.core.spec import load_spec

    spec_path = write_spec(simulated_raw())
    store = ExperimentStore.for_spec(tmp_path, load_spec(spec_path))
    store.initialise(load_spec(spec_path))
    (store.trials_dir / "0123456789abcdef.json").write_text('{"trial_id": "0123')
    assert main(["run", str(spec_path), "--storage", str(tmp_path)]) == 2
    assert "0123456789abcdef.json: corrupt trial record" in _one_line_error(capsys)
    assert not (store.root / "ray").exists()


def test_a_second_driver_on_the_same_directory_exits_2(write_spec, simulated_raw, tmp_path, capsys):
    spec_path = write_spec(simulated_raw())
    root = tmp_path / simulated_raw()["name"]
    root.mkdir()
    # A first driver's lock: flock on another open file description conflicts just as
    # another process's would.
    with (root / ".driver.lock").open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.write("pid 12345 on elsewhere")
        handle.flush()
        assert main(["run", str(spec_path), "--storage", str(tmp_path)]) == 2
    assert "in use by another dwtune driver" in _one_line_error(capsys)


# --------------------------------------------------------------------------- the console


def test_the_status_line_counts_trials_and_keeps_the_best_loss_per_depth(simulated_raw):
    import io

    from dwtune.core import vocabulary
    from dwtune.core.records import grid_requests, record_from_result
    from dwtune.core.spec import spec_from_dict
    from dwtune.study.progress import StudyProgress

    spec = spec_from_dict(simulated_raw())
    requests = grid_requests(spec)
    curve = [{vocabulary.STEP: 100, vocabulary.VAL_LOSS: 3.0}]
    earlier = record_from_result(requests[0], spec, curve, vocabulary.STATUS_FINISHED, 1.0)
    out = io.StringIO()
    progress = StudyProgress(out, interval_s=0.0)
    progress.begin("grid", requests[1:], [earlier])
    assert "[grid] 1 trial(s) already recorded" in out.getvalue()
    assert progress.eta_s() == float("inf")  # nothing finished yet: no estimate
    for request in requests[1:4]:
        progress.trial_started(request)
    better = [{vocabulary.STEP: 100, vocabulary.VAL_LOSS: 2.5}]
    progress.trial_finished(
        requests[1], record_from_result(requests[1], spec, better, vocabulary.STATUS_FINISHED, 1.0)
    )
    progress.trial_finished(
        requests[2],
        record_from_result(
            requests[2], spec, [], vocabulary.STATUS_FAILED, 0.5, error="RuntimeError: boom"
        ),
    )
    line = progress.status_line()
    assert line.startswith("[grid] 2/7 trials done, 1 running, 1 failed | ")
    assert progress.best[requests[1].shape.depth] == 2.5
    assert "failed: RuntimeError: boom" in out.getvalue()
    assert 0 < progress.eta_s() < float("inf")


def test_a_corrupt_spec_file_in_the_experiment_dir_exits_2(
    write_spec, simulated_raw, tmp_path, capsys
):
    spec_path = write_spec(simulated_raw())
    root = tmp_path / simulated_raw()["name"]
    root.mkdir()
    (root / "spec.yaml").write_text("name: [unclosed\n")
    assert main(["run", str(spec_path), "--storage", str(tmp_path)]) == 2
    assert "spec.yaml: corrupt" in _one_line_error(capsys)


@pytest.mark.slow  # a `dwtune run` process
def test_a_missing_corpus_exits_2_before_ray_starts(tmp_path):
    spec = tmp_path / "nocorpus.yaml"
    spec.write_text(
        "name: nocorpus\ndata: {corpus: /nonexistent/plays.txt}\n"
        "space: {depths: [1], budgets: [1e5]}\ntrain: {steps: 5}\n"
    )
    done = run_driver(spec, tmp_path / "experiments")
    assert done.returncode == 2
    assert "data.corpus: /nonexistent/plays.txt does not exist" in done.stderr
    assert "Ray:" not in done.stderr + done.stdout  # failed before connecting to Ray
    assert "Traceback" not in done.stderr


def test_a_trial_record_of_a_newer_schema_exits_2_naming_the_version_and_is_left_untouched(
    write_spec, simulated_raw, tmp_path, capsys
):
    from dwtune.core.records import RECORD_SCHEMA_VERSION, grid_requests, record_from_result
    from dwtune.core.spec import load_spec

    spec_path = write_spec(simulated_raw())
    spec = load_spec(spec_path)
    store = ExperimentStore.for_spec(tmp_path, spec)
    store.initialise(spec)
    request = grid_requests(spec)[0]
    store.write_record(record_from_result(request, spec, [{"val/loss": 2.0}], "finished", 1.0))
    path = store.record_path(request.trial_id)
    raw = json.loads(path.read_text())
    newer = RECORD_SCHEMA_VERSION + 1
    path.write_text(json.dumps(raw | {"schema_version": newer, "dwtune_version": "9.0.0"}))
    before = path.read_bytes()
    assert main(["run", str(spec_path), "--storage", str(tmp_path)]) == 2
    line = _one_line_error(capsys)
    assert f"schema version {newer}, written by dwtune 9.0.0" in line
    assert "install dwtune 9.0.0 or newer" in line and "delete" not in line
    assert path.read_bytes() == before
    assert not (store.root / "ray").exists()
