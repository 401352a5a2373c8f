"""The small simulated study most tests start from."""

from __future__ import annotations

import copy

# A tiny study on the simulated backend: 2 depths x 2 budgets x 2 seeds = 8 trials, each a few
# reports long. Tests copy it and change what they need.
SMALL_SIMULATED = {
    "name": "small",
    "trainer": "simulated",
    "data": {"tokenizer": "bpe", "vocab_size": 2000, "seq_len": 128},
    "model": {"heads": 2, "width_multiple": 8},
    "space": {"depths": [6, 12], "budgets": [1e6, 1e7], "seeds": 2},
    "train": {"steps": 400, "batch_size": 8, "eval_every": 100},
    "resources": {"cpu": 0.5, "retries": 0},
}


def small_simulated(**sections: dict) -> dict:
    """SMALL_SIMULATED with some sections updated (``name=...`` replaces the name)."""
    raw = copy.deepcopy(SMALL_SIMULATED)
    for key, value in sections.items():
        if isinstance(value, dict):
            raw.setdefault(key, {}).update(value)
        else:
            raw[key] = value
    return raw
