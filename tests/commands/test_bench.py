"""dwtune bench, the MFU peak, and the CPU-safe parts of benchmarks/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dwtune import cli
from dwtune.backends.pytorch.perf import attention_backend, peak_flops, peak_from_table, time_steps
from dwtune.core.budget import ModelShape

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--depth",
    "1",
    "--width",
    "16",
    "--heads",
    "2",
    "--seq-len",
    "16",
    "--batch-size",
    "2",
    "--vocab-size",
    "50",
    "--steps",
    "2",
    "--warmup",
    "1",
]


def bench_json(capsys, *extra: str) -> dict:
    code = cli.main(["bench", *TINY, "--json", *extra])
    assert code == 0
    return json.loads(capsys.readouterr().out)


def test_bench_reports_throughput_mfu_compile_and_memory(capsys):
    result = bench_json(capsys)
    assert result["params"] == 4176 and result["device"] == "cpu"
    assert result["tokens_per_s"] == pytest.approx(2 * 16 / result["step_time_s"])
    assert result["mfu"] == pytest.approx(
        result["flops_per_token"] * result["tokens_per_s"] / result["peak_flops"]
    )
    assert result["peak_source"].startswith("calibrated")
    assert result["compile"] is False and result["compile_time_s"] is None  # off on CPU
    assert result["peak_memory_bytes"] > 0 and result["attention_backend"] == "flash_cpu"


def test_bench_with_a_given_peak_says_so(capsys):
    result = bench_json(capsys, "--peak-flops", "1e12")
    assert result["peak_flops"] == 1e12 and result["peak_source"] == "given (--peak-flops)"


def test_bench_prints_a_readable_summary(capsys):
    assert cli.main(["bench", *TINY]) == 0
    out = capsys.readouterr().out
    for label in ("tokens/s", "step time", "MFU", "compile", "peak memory", "attention"):
        assert label in out


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--width", "15"], "width 15 is not divisible by heads 2"),
        (["--steps", "0"], "--steps: got 0"),
        (["--peak-flops", "-1"], "--peak-flops: got -1"),
    ],
)
def test_bench_bad_input_exits_2_with_one_line(capsys, flags, message):
    assert cli.main(["bench", *TINY, *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_bench_on_cuda_without_cuda_exits_2(capsys):
    assert cli.main(["bench", *TINY, "--device", "cuda"]) == 2
    assert "CUDA is not available" in capsys.readouterr().err


def test_peak_table_knows_the_common_gpus():
    assert peak_from_table("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_from_table("NVIDIA H100 PCIe") == 756e12
    assert peak_from_table("NVIDIA H200") == 989e12
    assert peak_from_table("NVIDIA A100-SXM4-80GB") == 312e12
    assert peak_from_table("Some Future Accelerator") is None


def test_peak_from_the_environment(monkeypatch):
    monkeypatch.setenv("DWTUNE_PEAK_FLOPS", "2e12")
    peak = peak_flops(torch.device("cpu"))
    assert peak.flops == 2e12 and "DWTUNE_PEAK_FLOPS" in peak.source


def test_time_steps_runs_warmup_then_timed_steps():
    calls = []
    times = time_steps(lambda: calls.append(1), steps=5, warmup=3, device=torch.device("cpu"))
    assert len(calls) == 8 and len(times.times_s) == 5
    assert times.compile_s >= 0


def test_attention_backend_on_cpu_is_the_fused_kernel():
    shape = ModelShape(depth=1, width=2048, heads=2, vocab_size=10, seq_len=128)
    assert attention_backend(shape, torch.device("cpu"), torch.float32)[0] == "flash_cpu"


# --------------------------------------------------------------------------- benchmarks/


def run_script(args: list[str], timeout: int = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env={**os.environ, **env}
    )


@pytest.mark.slow  # trains with both trainers
def test_bench_vs_reference_runs_both_on_cpu():
    done = run_script(
        [
            sys.executable,
            "benchmarks/bench_vs_reference.py",
            "--shapes",
            "2x16",
            "--seq-len",
            "16",
            "--batch-size",
            "2",
            "--vocab-size",
            "50",
            "--rounds",
            "2",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--json",
        ]
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["params"] == 7280  # the reference has exactly dwtune's parameters
    assert result["ratio"] == pytest.approx(
        result["dwtune_tokens_per_s"] / result["reference_tokens_per_s"]
    )
    assert len(result["round_ratios"]) == 2


def test_gpu_sweep_script_parses():
    assert run_script(["bash", "-n", "benchmarks/gpu_sweep.sh"]).returncode == 0


def read_lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_gpu_sweep_script_runs_on_cpu_with_a_tiny_shape(tmp_path):
    results = tmp_path / "results.jsonl"
    done = run_script(
        ["bash", "benchmarks/gpu_sweep.sh", str(results)],
        DEVICE="cpu",
        DEPTHS="1 2",
        WIDTHS="16",
        BATCH="2",
        STEPS="2",
        WARMUP="1",
        SEQ_LEN="16",
        VOCAB="50",
        PACK_COUNTS="1 2",
        PACK_STEPS="2",
        TWIN_CHECKS="",  # the twins and pilot parts: the test below
        PILOT_SPEC="",
        PYTHON=sys.executable,
    )
    assert done.returncode == 0, done.stderr
    rows = read_lines(results)
    assert [(r["depth"], r["width"], r["batch_size"]) for r in rows] == [(1, 16, 2), (2, 16, 2)]
    assert {r["compile_mode"] for r in rows} == {"default"}  # CPU: the device default only
    summary = (tmp_path / "results.txt").read_text()
    assert "MFU peak: calibrated" in summary and "flash_cpu" in summary
    packed = read_lines(tmp_path / "results_packed.jsonl")
    assert [(p["packed"], p["width"]) for p in packed] == [(1, 16), (2, 16)]
    assert all(p["tokens_per_s"] > 0 for p in packed) and "tokens/s (sum)" in summary
    assert read_lines(tmp_path / "results_twins.jsonl") == []  # skipped parts write nothing
    assert read_lines(tmp_path / "results_pilot.jsonl") == []


@pytest.mark.slow
def test_gpu_sweep_twins_and_pilot_cells_run_on_cpu(tmp_path):
    """The sharded (2 processes) and micro-batched trials against their plain twin, and
    gpu_pilot.yaml's cells with the least and most planned memory, timed."""
    results = tmp_path / "results.jsonl"
    done = run_script(
        ["bash", "benchmarks/gpu_sweep.sh", str(results)],
        DEVICE="cpu",
        COMPILES="",  # the shapes and packing parts: the test above
        PACK_WIDTHS="",
        WARMUP="1",
        TWIN_WIDTH="16",
        TWIN_BATCH="4",
        TWIN_SEQ_LEN="16",
        TWIN_MICRO="2",
        TWIN_STEPS="4",
        PILOT_STEPS="1",
        PILOT_BATCH="2",
        DWTUNE_PEAK_FLOPS="1e12",  # no calibration per bench process
        PYTHON=sys.executable,
        timeout=540,
    )
    assert done.returncode == 0, done.stderr
    assert read_lines(results) == [] and read_lines(tmp_path / "results_packed.jsonl") == []
    twins = read_lines(tmp_path / "results_twins.jsonl")
    assert [(t["check"], t["workers"], t["micro_batch"]) for t in twins] == [
        ("sharded", 2, None),
        ("micro", 1, 2),
    ]
    assert all(t["passed"] and t["max_rel_diff"] <= t["rtol"] == 1e-4 for t in twins)
    summary = (tmp_path / "results.txt").read_text()
    assert "PASS sharded trial follows its plain twin's loss curve" in summary
    assert "PASS micro trial follows its plain twin's loss curve" in summary
    pilot = read_lines(tmp_path / "results_pilot.jsonl")
    assert [(p["depth"], p["width"]) for p in pilot] == [(2, 144), (12, 528)]  # least, most
    assert all(p["tokens_per_s"] > 0 and p["plan_memory_bytes"] > 0 for p in pilot)
    assert all(p["trial_hours"] > 0 and p["batch_size"] == 2 for p in pilot)
    assert "plan GiB" in summary


def test_cpu_allocator_tuning_can_be_switched_off(monkeypatch):
    from dwtune.backends.pytorch.perf import tune_cpu_allocator

    monkeypatch.setenv("DWTUNE_MALLOC_TUNING", "0")
    assert tune_cpu_allocator() is False
    monkeypatch.delenv("DWTUNE_MALLOC_TUNING")
    if "CS_GNU_LIBC_VERSION" in os.confstr_names:  # glibc
        assert tune_cpu_allocator() is True
