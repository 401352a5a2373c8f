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


def unit_spec(cache_dir: str, depth: int, budget: float, seq_len: int = 16, **train):
    """A one-shape spec for the trainer's unit tests: a 96-token vocabulary, 16-token windows,
    a batch of 4, a few evaluations (``train`` overrides any of these training settings)."""
    from dwtune.core.spec import spec_from_dict  # the specs above stay plain dicts

    settings = {
        "steps": 40,
        "batch_size": 4,
        "lr": 3e-3,
        "warmup_steps": 5,
        "eval_every": 10,
        "eval_batches": 2,
        **train,
    }
    return spec_from_dict(
        {
            "name": "unit",
            "space": {"depths": [depth], "budgets": [budget]},
            "data": {"cache_dir": cache_dir, "seq_len": seq_len, "vocab_size": 96},
            "model": {"width_multiple": 2},
            "train": settings,
        }
    )
