"""benchmarks/gpu_check.sh and gpu_check.py: the no-GPU answer, the summary's shape, and the
check logic in the CPU dev mode (tiny shapes, fp32, gloo); a failed, injected or unfinished
check makes the exit non-zero."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import gpu_check

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
CHECK_KEYS = {"name", "ok", "value", "target", "seconds", "detail"}


def run_check(tmp_path: Path, *args: str, timeout: float = 300, **env: str):
    """gpu_check.py in its own process; (completed process, summary or None)."""
    out = tmp_path / "summary.json"
    loose = ["--budget-s", "1800", "--cap-scale", "3"]  # the logic, not the timing, on a busy CPU
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), *loose, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
        env={**os.environ, "DWTUNE_THREADS": "1", "DWTUNE_PEAK_FLOPS": "1e12", **env},
    )
    return done, (json.loads(out.read_text()) if out.is_file() else None)


def assert_shape(summary: dict, stdout: str) -> None:
    assert json.loads(stdout) == summary  # one object on stdout, the same as the file
    assert {"ok", "mode", "device", "device_name", "memory_bytes", "failed", "checks"} <= set(
        summary
    )
    for check in summary["checks"]:
        assert set(check) == CHECK_KEYS
        assert check["ok"] in (True, False, None) and check["seconds"] >= 0
    failed = [c["name"] for c in summary["checks"] if c["ok"] is False]
    assert summary["failed"] == failed and summary["ok"] == (not failed)


def test_the_scripts_parse():
    for name in ("gpu_check.sh", "gpu_sweep.sh"):
        done = subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / name)])
        assert done.returncode == 0, name


def test_without_a_gpu_it_exits_non_zero_at_once_with_one_line(tmp_path):
    started = time.monotonic()
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), str(tmp_path / "s.json")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert time.monotonic() - started < 10
    assert done.returncode == gpu_check.NO_CUDA_EXIT == 2
    assert done.stdout == "" and done.stderr.count("\n") == 1
    assert done.stderr.startswith("gpu_check: no CUDA device") and "--device cpu" in done.stderr


def test_the_cheap_checks_pass_in_cpu_dev_mode(tmp_path):
    done, summary = run_check(tmp_path, "--device", "cpu", "--only", "mfu,micro,fsdp")
    assert done.returncode == 0, done.stderr
    assert_shape(summary, done.stdout)
    assert summary["mode"] == "cpu-dev" and summary["ok"] is True
    checks = {c["name"]: c for c in summary["checks"]}
    assert list(checks) == ["mfu_w64", "memory_w64", "micro_batch", "fsdp"]
    assert checks["mfu_w64"]["ok"] is None and checks["memory_w64"]["ok"] is None  # not judged
    assert checks["mfu_w64"]["value"] > 0 and "not judged on cpu" in checks["mfu_w64"]["detail"]
    assert checks["micro_batch"]["ok"] and checks["micro_batch"]["value"] <= 1e-3
    assert checks["fsdp"]["ok"] and checks["fsdp"]["value"] <= 1e-4
    assert "gloo, world size 1" in checks["fsdp"]["detail"]


def test_an_injected_failure_makes_the_exit_non_zero(tmp_path):
    done, summary = run_check(
        tmp_path, "--device", "cpu", "--only", "micro", "--inject-failure", "micro"
    )
    assert done.returncode == 1
    assert_shape(summary, done.stdout)
    (check,) = summary["checks"]
    assert summary["failed"] == ["micro_batch"] and check["ok"] is False
    assert "injected failure" in check["detail"]


def dev_run(tmp_path: Path, budget_s: float = 60.0, cap_scale: float = 1.0) -> gpu_check.Run:
    args = argparse.Namespace(
        device="cpu", quick=True, budget_s=budget_s, cap_scale=cap_scale, inject_failure=None,
        only=list(gpu_check.GROUPS), output=str(tmp_path / "s.json"), fsdp_world=0,
    )  # fmt: skip
    return gpu_check.Run(args, tmp_path)


def test_a_check_the_budget_leaves_no_time_for_is_a_failure(tmp_path):
    run = dev_run(tmp_path, budget_s=gpu_check.MIN_START_S / 2)
    gpu_check.run_group(run, "tune", lambda _run, _deadline: [])
    (check,) = run.checks
    assert check.name == "tune_trial" and check.ok is False
    assert check.detail.startswith("not run:")
    assert gpu_check.summary(run, {})["failed"] == ["tune_trial"]


def test_a_check_past_its_deadline_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "MIN_START_S", 0.0)
    run = dev_run(tmp_path, cap_scale=0.5 / gpu_check.CAPS_S["micro"])  # a 0.5 s deadline
    started = time.monotonic()

    def stuck(run: gpu_check.Run, _deadline: float) -> list:
        run.stage = "training in micro-batches"
        time.sleep(30)
        return []

    gpu_check.run_group(run, "micro", stuck)
    assert time.monotonic() - started < 10
    (check,) = run.checks
    assert check.name == "micro_batch" and check.ok is False
    assert "CheckTimeout" in check.detail and "deadline" in check.detail
    assert check.detail.endswith("(while training in micro-batches)")


def test_past_the_budget_the_watchdog_reports_what_is_done_and_exits_1(tmp_path, monkeypatch):
    run = dev_run(tmp_path, budget_s=-20.0)  # already past the budget and its grace
    run.args.only = ["mfu", "micro"]
    run.partial = [gpu_check.Check("mfu_w64", None, 0.2, ">= 0.4", 1.0, "measured")]
    exits = []
    monkeypatch.setattr(gpu_check.os, "_exit", exits.append)
    out = tmp_path / "stdout.json"
    with out.open("wb") as handle:
        gpu_check.watchdog(run, {"device_name": "test"}, handle.fileno())
    summary = json.loads(out.read_text())
    assert exits == [1] and summary == json.loads((tmp_path / "s.json").read_text())
    assert [c["name"] for c in summary["checks"]] == ["mfu_w64", "micro_batch"]
    assert summary["failed"] == ["micro_batch"] and summary["ok"] is False
    assert "budget ran out" in summary["checks"][1]["detail"]
    assert gpu_check.emit(run, {}, -1) == 1  # the main thread writes nothing after it


def test_curves_with_other_evaluation_steps_differ_infinitely():
    one = [{"step": 4, "train/loss": 2.0, "val/loss": 1.5}]
    same = [{"step": 4, "train/loss": 2.0005, "val/loss": 1.5}]
    other = [{"step": 8, "train/loss": 2.0, "val/loss": 1.5}]
    assert gpu_check.largest_difference(same, one, relative=False) == pytest.approx(5e-4)
    assert gpu_check.largest_difference(same, one, relative=True) == pytest.approx(2.5e-4)
    assert gpu_check.largest_difference(other, one, relative=False) == float("inf")


@pytest.mark.slow
@pytest.mark.ray
def test_every_check_runs_in_cpu_dev_mode(tmp_path):
    """All six, the killed-and-resumed process and the Tune trial (`dwtune run`) included;
    the sharded job as two processes (what a machine with 2+ GPUs runs)."""
    done, summary = run_check(tmp_path, "--device", "cpu", "--fsdp-world", "2", timeout=540)
    assert_shape(summary, done.stdout)
    checks = {c["name"]: c for c in summary["checks"]}
    assert list(checks) == [
        "mfu_w64", "memory_w64", "micro_batch", "fsdp", "dcp_resume", "tune_trial",
    ]  # fmt: skip
    assert "world size 2" in checks["fsdp"]["detail"]
    resume = checks["dcp_resume"]["detail"]
    assert "killed (exit -9) after its checkpoint at step 4" in resume
    assert "reported from step 8" in resume and "checkpoint DCP" in resume
    assert checks["tune_trial"]["ok"], checks["tune_trial"]
    assert done.returncode == 0 and summary["ok"], summary["failed"]


@pytest.mark.gpu
def test_the_go_no_go_on_a_gpu_reports_every_check_within_nine_minutes(tmp_path):
    """The real thing (up to 9 minutes): a summary naming the device and every check; passing
    is the GPU's verdict, not this test's."""
    started = time.monotonic()
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), str(tmp_path / "s.json")],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert time.monotonic() - started < 9 * 60
    summary = json.loads((tmp_path / "s.json").read_text())
    assert_shape(summary, done.stdout)
    assert done.returncode == (0 if summary["ok"] else 1)
    assert summary["mode"] == "gpu" and summary["memory_bytes"] > 0 and summary["device_name"]
    names = [c["name"] for c in summary["checks"]]
    for prefix in gpu_check.PREFIX.values():  # every group reported, passed or not
        assert any(name.startswith(prefix) for name in names), (prefix, names)
    if not any(name == "mfu" for name in names):  # the MFU group ran to its end
        assert names[:4] == ["mfu_w1024", "memory_w1024", "mfu_w2048", "memory_w2048"]
