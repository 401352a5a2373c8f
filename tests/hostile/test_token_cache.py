"""A damaged token cache: bytes overwritten in place (same size) are found, the entry named and
rebuilt before a trial reads it, and the trial's losses are those of an undamaged cache; a token
id beyond the vocabulary is one line naming the entry, not torch's IndexError."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from dwtune.backends.data import cache
from dwtune.cli import main

pytestmark = [pytest.mark.hostile, pytest.mark.slow]
BLOCK = 4096  # bytes overwritten: one page, the size of a torn or misdirected write


def _spec(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"line {i}: the quick brown fox {i % 97}" for i in range(20_000)))
    raw = {
        "name": "cache",
        "trainer": "torch",
        "data": {
            "corpus": str(corpus),
            "tokenizer": "char",
            "vocab_size": 64,
            "seq_len": 16,
            "cache_dir": str(tmp_path / "token-cache"),
        },
        "model": {"heads": 2, "width_multiple": 8},
        "space": {"depths": [1, 2], "budgets": [3e3, 1.2e4], "seeds": 1},
        "train": {
            "steps": 40,
            "batch_size": 8,
            "warmup_steps": 4,
            "eval_every": 20,
            "eval_batches": 2,
            "device": "cpu",
            "compile": "false",
            "lr": 3e-3,
        },
        "resources": {"cpu": 1, "retries": 0},
    }
    path = tmp_path / "cache.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _entry(tmp_path: Path) -> Path:
    (entry,) = (tmp_path / "token-cache" / "tokens").iterdir()
    return entry


def _overwrite(path: Path, offset: int, size: int) -> None:
    """Bytes 0xFF in place: the file keeps its size, its ids become 65535."""
    with path.open("r+b") as handle:
        handle.seek(offset)
        handle.write(b"\xff" * size)


def _train(spec: Path, capfd) -> tuple[int, list[str], dict]:
    capfd.readouterr()
    code = main(["train", str(spec), "--depth", "1", "--width", "16", "--json"])
    out, err = capfd.readouterr()
    metrics = json.loads(out.strip().splitlines()[-1])["metrics"] if code == 0 else {}
    return code, [line for line in err.splitlines() if line.strip()], metrics


def _final_losses(metrics: dict) -> tuple:
    return metrics["train/loss"], metrics["val/loss"], metrics["val/best_loss"]


def test_bytes_overwritten_in_place_are_named_rebuilt_and_train_as_before(tmp_path, capfd):
    spec = _spec(tmp_path)
    code, _, clean = _train(spec, capfd)
    assert code == 0
    entry = _entry(tmp_path)
    train_bin = entry / "train.bin"
    size = train_bin.stat().st_size
    _overwrite(train_bin, BLOCK, BLOCK)
    assert train_bin.stat().st_size == size
    code, lines, rebuilt = _train(spec, capfd)
    said = [line for line in lines if line.startswith("token cache entry")]
    assert code == 0 and said == [
        f"token cache entry {entry}: train.bin does not match the SHA-256 in its manifest "
        "(changed on disk); rebuilding it"
    ]
    assert _final_losses(rebuilt) == _final_losses(clean)


def test_a_token_id_beyond_the_vocabulary_is_one_line_naming_the_entry(tmp_path, capfd):
    """Damage under the filesystem (a failing disk) keeps the file's stamp, so the entry is not
    hashed on open; the trial's id check stops it before the embedding would."""
    spec = _spec(tmp_path)
    assert main(["prepare", str(spec), "--no-progress"]) == 0
    entry = _entry(tmp_path)
    train_bin = entry / "train.bin"
    _overwrite(train_bin, 0, train_bin.stat().st_size)
    stamps = json.loads((entry / cache.VERIFIED).read_text())
    stamps["train"] = cache._stamp(train_bin)
    (entry / cache.VERIFIED).write_text(json.dumps(stamps))
    code, lines, _ = _train(spec, capfd)
    assert code == 2
    assert lines[-1].startswith(
        f"dwtune train: error: token cache entry {entry}: train.bin holds token id 65535, "
        "beyond its"
    )
    assert not any("Traceback" in line or "IndexError" in line for line in lines)


@pytest.mark.ray
def test_a_run_on_a_damaged_cache_names_and_rebuilds_it_and_every_trial_finishes(tmp_path):
    spec = _spec(tmp_path)
    assert main(["prepare", str(spec), "--no-progress"]) == 0
    entry = _entry(tmp_path)
    _overwrite(entry / "train.bin", BLOCK, BLOCK)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    command = [sys.executable, "-m", "dwtune", "run", str(spec), "--storage", str(tmp_path)]
    done = subprocess.run(
        [*command, "--grid-only"], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if line.startswith("token cache entry")]
    assert said == [
        f"token cache entry {entry}: train.bin does not match the SHA-256 in its manifest "
        "(changed on disk); rebuilding it"
    ]
    trials = pd.read_parquet(tmp_path / "cache" / "trials.parquet")
    assert len(trials) == 4 and set(trials.status) == {"finished"}
