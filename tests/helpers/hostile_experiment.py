"""One small simulated experiment (no Ray): its spec, how to build it, a digest of its records.

tests/hostile/conftest.py builds it once per session and gives each case a copy."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path

import yaml

from dwtune.cli import main
from dwtune.core.records import grid_requests
from dwtune.core.spec import spec_from_dict
from dwtune.storage.store import ExperimentStore
from dwtune.study.refine import run_refine
from dwtune.study.runners.local import LocalRunner

BASE = {
    "name": "hostile",
    "trainer": "simulated",
    "data": {"tokenizer": "bpe", "vocab_size": 2000, "seq_len": 128},
    "model": {"heads": 2, "width_multiple": 2},
    "space": {"depths": [6, 12, 18], "budgets": {"min": 1e6, "max": 1e9, "num": 4}, "seeds": 1},
    "train": {"steps": 200, "batch_size": 8, "eval_every": 100},
    # no scan for a second crossing: these tests are about inputs and faults, not the scan
    "refine": {"pairs": [[6, 12]], "tolerance": 0.5, "seeds": 1, "max_seeds": 2, "scan_spacing": 0},
    "simulated": {"noise": 0.0},
    "resources": {"cpu": 1, "retries": 0},
}


def base_raw() -> dict:
    return copy.deepcopy(BASE)


def build_experiment(root: Path) -> Path:
    """Grid and refine stages done in-process under ``root``, exported and reported."""
    spec = spec_from_dict(base_raw())
    store = ExperimentStore.for_spec(root / "experiments", spec)
    store.initialise(spec)
    runner = LocalRunner(spec, store)
    runner.run(grid_requests(spec))
    run_refine(spec, store, runner.run)
    assert main(["export", str(store.root)]) == 0
    assert main(["report", str(store.root)]) == 0
    (root / "hostile.yaml").write_text(yaml.safe_dump(base_raw(), sort_keys=False))
    return root


def trials_digest(trials_dir: Path) -> dict[str, str]:
    """name -> sha256 of every regular file directly in trials/."""
    if not trials_dir.is_dir():
        return {}
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(trials_dir.iterdir())
        if p.is_file() and not p.is_symlink()
    }
