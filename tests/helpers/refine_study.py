"""A small simulated refine study trained in process (no Ray): the spec the refine-stage tests
start from, and its finished grid."""

from __future__ import annotations

import copy
from pathlib import Path

from dwtune.core.records import grid_requests
from dwtune.core.spec import spec_from_dict
from dwtune.storage.store import ExperimentStore
from dwtune.study.runners.local import LocalRunner

# Depths 6 and 12; 4 grid sizes 1e6..1e9 bracket N*(12) = 1.3e7 between 1e7 and 1e8. Widths
# are multiples of 2, so width rounding never stops the bisection before the tolerance.
BASE = {
    "name": "refine_test",
    "trainer": "simulated",
    "data": {"tokenizer": "bpe", "vocab_size": 2000, "seq_len": 128},
    "model": {"heads": 2, "width_multiple": 2},
    "space": {"depths": [6, 12], "budgets": {"min": 1e6, "max": 1e9, "num": 4}, "seeds": 1},
    "train": {"steps": 200, "batch_size": 8, "eval_every": 100},
    "refine": {"pairs": [[6, 12]], "tolerance": 0.05, "seeds": 1, "max_seeds": 4, "max_rounds": 12},
    "simulated": {"noise": 0.0},
}


def make_spec(**sections):
    raw = copy.deepcopy(BASE)
    for key, values in sections.items():
        raw[key] = {**raw[key], **values}
    return spec_from_dict(raw)


def grid_done(root: Path, spec):
    """An experiment directory whose grid stage has finished (in-process)."""
    store = ExperimentStore.for_spec(root, spec)
    store.initialise(spec)
    LocalRunner(spec, store).run(grid_requests(spec))
    return store
