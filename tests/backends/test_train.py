"""The torch trainer: learning, determinism, checkpoints, early stopping, divergence, CLI."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
import yaml

from dwtune import cli
from dwtune.backends.pytorch.train import (
    CHECKPOINT_FILE,
    configure_threads,
    resolve_compile,
    train_model,
)
from dwtune.backends.trial import run_trial_inprocess
from dwtune.core import vocabulary
from dwtune.core.budget import ModelShape
from dwtune.core.errors import InputError
from dwtune.core.records import make_request
from dwtune.core.spec import TrainConfig
from tests.helpers.specs import unit_spec

REPORT_KEYS = {
    vocabulary.TRAIN_LOSS,
    vocabulary.VAL_LOSS,
    vocabulary.VAL_BEST_LOSS,
    vocabulary.STEP,
    vocabulary.TOKENS,
    vocabulary.LR,
    vocabulary.GRAD_NORM,
    vocabulary.TOKENS_PER_S,
    vocabulary.STEP_TIME_S,
    vocabulary.MFU,
    vocabulary.ELAPSED_S,
    vocabulary.WORKERS,
    vocabulary.GPUS,
}
SHAPE = ModelShape(depth=1, width=16, heads=2, vocab_size=96, seq_len=16)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("token-cache"))


def make_spec(cache_dir: str, seq_len: int = 16, **train) -> object:
    return unit_spec(cache_dir, depth=1, budget=1e4, seq_len=seq_len, **train)


def run(spec, shape=SHAPE, seed=0, **kwargs) -> tuple[list[dict], dict]:
    reports: list[dict] = []
    final = train_model(spec, shape, seed, lambda m, _c: reports.append(m), **kwargs)
    return reports, final


def losses(reports: list[dict]) -> list[tuple]:
    return [
        (
            r[vocabulary.STEP],
            r[vocabulary.TRAIN_LOSS],
            r[vocabulary.VAL_LOSS],
            r[vocabulary.GRAD_NORM],
        )
        for r in reports
    ]


# --------------------------------------------------------------------------- learning


@pytest.mark.slow  # real training: 300 steps
def test_loss_decreases_on_the_bundled_corpus(cache_dir):
    spec = make_spec(
        cache_dir,
        seq_len=32,
        steps=300,
        batch_size=8,
        warmup_steps=30,
        eval_every=100,
        eval_batches=4,
    )
    shape = ModelShape(depth=1, width=32, heads=2, vocab_size=96, seq_len=32)
    reports, final = run(spec, shape)
    val = [r[vocabulary.VAL_LOSS] for r in reports]
    assert [r[vocabulary.STEP] for r in reports] == [100, 200, 300]
    assert val[0] > val[1] > val[2]
    assert val[2] < 0.75 * math.log(80)  # well below a uniform guess over ~80 characters
    assert final == reports[-1] and final[vocabulary.STATUS] == vocabulary.STATUS_FINISHED
    assert final[vocabulary.VAL_BEST_LOSS] == val[2]
    assert final[vocabulary.TOKENS] == 300 * 8 * 32


def test_every_report_has_the_metric_vocabulary(cache_dir):
    reports, final = run(make_spec(cache_dir, steps=25))
    assert [r[vocabulary.STEP] for r in reports] == [10, 20, 25]  # and the end
    assert all(set(r) >= REPORT_KEYS for r in reports)
    assert [vocabulary.STATUS in r for r in reports] == [False, False, True]
    assert all(r[vocabulary.TOKENS_PER_S] > 0 and r[vocabulary.MFU] > 0 for r in reports)
    assert final[vocabulary.LR] == pytest.approx(0.0, abs=3e-3 * 0.02)  # cosine to zero


def test_same_seed_gives_identical_losses_and_another_seed_does_not(cache_dir):
    spec = make_spec(cache_dir, steps=30)
    first, _ = run(spec, seed=1)
    second, _ = run(spec, seed=1)
    other, _ = run(spec, seed=2)
    assert losses(first) == losses(second)
    assert losses(first) != losses(other)


# --------------------------------------------------------------------------- checkpoints


class Interrupted(Exception):
    pass


def test_restored_run_ends_like_an_uninterrupted_one(cache_dir, tmp_path):
    spec = make_spec(cache_dir, steps=40)
    whole, whole_final = run(spec, checkpoint_dir=str(tmp_path / "whole"))
    part = tmp_path / "part"
    seen: list[dict] = []

    def report_then_die(m: dict, checkpoint: str | None) -> None:
        assert checkpoint == str(part) and (part / CHECKPOINT_FILE).is_file()
        seen.append(m)
        if m[vocabulary.STEP] == 20:
            raise Interrupted

    with pytest.raises(Interrupted):
        train_model(spec, SHAPE, 0, report_then_die, checkpoint_dir=str(part))
    resumed, final = run(spec, checkpoint_dir=str(part), resume_from=str(part))
    assert [r[vocabulary.STEP] for r in resumed] == [30, 40]
    assert losses(seen + resumed) == losses(whole)
    assert final[vocabulary.VAL_LOSS] == whole_final[vocabulary.VAL_LOSS]
    assert final[vocabulary.STATUS] == vocabulary.STATUS_FINISHED


def test_a_resume_reads_the_checkpoint_into_host_memory_first(cache_dir, tmp_path, monkeypatch):
    """torch.load maps the whole checkpoint to the CPU; the model and optimizer then copy it
    into their own tensors on the device (no second full state on a GPU)."""
    spec = make_spec(cache_dir, steps=20)
    whole, _ = run(spec)
    part = tmp_path / "part"

    def stop_at_10(_m: dict, _checkpoint: str | None) -> None:
        raise Interrupted

    with pytest.raises(Interrupted):  # at its first report, step 10
        train_model(spec, SHAPE, 0, stop_at_10, checkpoint_dir=str(part))
    load, seen = torch.load, []

    def recording_load(*args, **kwargs):
        seen.append(kwargs.get("map_location"))
        return load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", recording_load)
    resumed, _ = run(spec, resume_from=str(part))
    assert seen == ["cpu"]
    assert losses(resumed) == losses(whole)[1:]  # steps 20: the uninterrupted run's


def test_resuming_a_finished_checkpoint_returns_its_result(cache_dir, tmp_path):
    spec = make_spec(cache_dir, steps=10)
    _, final = run(spec, checkpoint_dir=str(tmp_path))
    reports, again = run(spec, resume_from=str(tmp_path))
    assert reports == [] and again == final


def test_a_failed_checkpoint_write_keeps_the_previous_checkpoint(cache_dir, tmp_path, monkeypatch):
    run(make_spec(cache_dir, steps=10), checkpoint_dir=str(tmp_path))
    before = (tmp_path / CHECKPOINT_FILE).read_bytes()

    def full_disk(state, handle):
        handle.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(OSError, match="disk full"):
        run(make_spec(cache_dir, steps=20), checkpoint_dir=str(tmp_path))
    assert (tmp_path / CHECKPOINT_FILE).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_FILE]


def test_a_checkpoint_of_another_trial_is_refused(cache_dir, tmp_path):
    spec = make_spec(cache_dir, steps=10)
    run(spec, seed=0, checkpoint_dir=str(tmp_path))
    with pytest.raises(InputError, match="not this trial's"):
        run(spec, seed=1, resume_from=str(tmp_path))
    with pytest.raises(InputError, match="does not exist"):
        run(spec, resume_from=str(tmp_path / "elsewhere"))


# --------------------------------------------------------------------------- stopping


@pytest.mark.slow  # two real trainings
def test_early_stopping_after_patience_steps_without_improvement(cache_dir):
    # lr 1e-30: updates vanish below float32 resolution, so validation never improves
    frozen = {"lr": 1e-30, "schedule": "constant", "warmup_steps": 0, "steps": 100}
    reports, final = run(make_spec(cache_dir, patience=20, **frozen))
    assert [r[vocabulary.STEP] for r in reports] == [10, 20, 30]
    assert final[vocabulary.STATUS] == vocabulary.STATUS_EARLY_STOPPED
    assert len({r[vocabulary.VAL_LOSS] for r in reports}) == 1
    _, final = run(make_spec(cache_dir, **frozen))
    assert final[vocabulary.STEP] == 100 and final[vocabulary.STATUS] == vocabulary.STATUS_FINISHED


@pytest.mark.parametrize("lr", [50.0, 100.0])  # 100: the largest train.lr the spec accepts
def test_an_absurd_learning_rate_ends_as_diverged_not_as_a_crash(cache_dir, lr):
    reports, final = run(
        make_spec(cache_dir, lr=lr, warmup_steps=0, schedule="constant", steps=100)
    )
    assert final[vocabulary.STATUS] == vocabulary.STATUS_DIVERGED
    assert final == reports[-1] and 0 < final[vocabulary.STEP] < 100
    assert not math.isfinite(final[vocabulary.TRAIN_LOSS])
    assert set(final) >= REPORT_KEYS


# --------------------------------------------------------------------------- pieces


def test_learning_rate_schedules():
    cfg = TrainConfig(steps=110, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert [cfg.lr_at(s, 110) for s in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert cfg.lr_at(10, 110) == 1.0
    assert cfg.lr_at(60, 110) == pytest.approx(0.55)  # halfway down the cosine
    assert cfg.lr_at(109, 110) == pytest.approx(0.1, abs=1e-3)
    linear = TrainConfig(steps=110, lr=1.0, warmup_steps=10, schedule="linear")
    assert linear.lr_at(60, 110) == pytest.approx(0.5)
    constant = TrainConfig(steps=110, lr=1.0, warmup_steps=10, schedule="constant")
    assert constant.lr_at(100, 110) == 1.0


def test_threads_follow_the_cpus_a_trial_was_given(monkeypatch):
    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("DWTUNE_THREADS", raising=False)
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert configure_threads() == 1
        monkeypatch.setenv("DWTUNE_THREADS", str(max(2, os.cpu_count() or 2)))
        assert configure_threads() == max(2, os.cpu_count() or 2)
    finally:
        torch.set_num_threads(before)


def test_compile_defaults_to_off_on_cpu_and_on_on_cuda():
    assert resolve_compile("auto", torch.device("cpu")) is False
    assert resolve_compile("auto", torch.device("cuda")) is True
    assert resolve_compile("true", torch.device("cpu")) is True
    assert resolve_compile(False, torch.device("cuda")) is False


def test_the_trial_seam_records_the_trainers_result(cache_dir):
    spec = make_spec(cache_dir, steps=20)
    cell = spec.cell(1, 1e4)
    record = run_trial_inprocess(spec, make_request(spec, cell, 0, "grid"))
    assert record.status == vocabulary.STATUS_FINISHED and record.steps == 20
    assert record.final_val_loss == record.curve[-1][vocabulary.VAL_LOSS]
    # one process on CPU: no GPU held; its MFU lies within the reports' (a weighted mean)
    assert record.workers == 1 and record.gpu_seconds == 0.0
    reported = [r[vocabulary.MFU] for r in record.curve]
    assert min(reported) <= record.mfu <= max(reported) and record.mfu > 0


# --------------------------------------------------------------------------- dwtune train


@pytest.fixture()
def spec_file(tmp_path, cache_dir) -> str:
    spec = {
        "name": "cli",
        "space": {"depths": [1], "budgets": [3e3]},
        "data": {"cache_dir": cache_dir, "seq_len": 16, "vocab_size": 96},
        "model": {"width_multiple": 2},
        "train": {"steps": 500, "batch_size": 4, "eval_every": 10, "eval_batches": 2},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def test_dwtune_train_runs_one_trial_and_prints_the_metrics(spec_file, capsys, tmp_path):
    code = cli.main(
        [
            "train",
            spec_file,
            "--depth",
            "1",
            "--width",
            "16",
            "--steps",
            "20",
            "--json",
            "--checkpoint-dir",
            str(tmp_path / "ckpt"),
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["metrics"][vocabulary.STATUS] == vocabulary.STATUS_FINISHED
    assert out["metrics"][vocabulary.STEP] == 20
    assert out["peak_source"].startswith("calibrated")
    assert (tmp_path / "ckpt" / CHECKPOINT_FILE).is_file()


def test_dwtune_train_solves_the_width_for_a_budget(spec_file, capsys):
    code = cli.main(
        ["train", spec_file, "--depth", "1", "--budget", "3e3", "--steps", "10", "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["shape"]["width"] == 16  # 12 * 1 * 16² = 3072, the closest to 3e3


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--width", "15"], "width 15 is not divisible by heads 2"),
        (["--width", "16", "--steps", "0"], "--steps: got 0"),
    ],
)
def test_dwtune_train_bad_shape_or_settings_exit_2(spec_file, capsys, flags, message):
    code = cli.main(["train", spec_file, "--depth", "1", *flags])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and "\n" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_dwtune_train_on_cuda_without_cuda_exits_2(spec_file, capsys):
    code = cli.main(["train", spec_file, "--depth", "1", "--width", "16", "--device", "cuda"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "CUDA is not available" in err and "\n" not in err


def test_resuming_with_other_settings_or_a_damaged_checkpoint_is_refused(tmp_path, capsys):
    from dwtune.cli import main

    spec = str(Path(__file__).resolve().parents[2] / "search_spaces" / "quickstart.yaml")
    base = ["train", spec, "--depth", "1", "--width", "16", "--device", "cpu", "--json"]
    assert main([*base, "--steps", "2", "--checkpoint-dir", str(tmp_path)]) == 0
    assert main([*base, "--steps", "6", "--resume-from", str(tmp_path)]) == 2
    assert "was trained with other settings (changed: steps)" in capsys.readouterr().err
    (tmp_path / "state.pt").write_bytes(b"junk")
    assert main([*base, "--steps", "2", "--resume-from", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "is not a readable checkpoint" in err and "Traceback" not in err
