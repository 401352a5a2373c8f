"""Trial identities survive changes to how the spec is defined: an experiment folder resumes.

A trial's identity is a hash of the spec's sections (dwtune.core.records.trial_identity), so a
change in how a section is built (the move of the sections to pydantic dataclasses) must leave
every field's value and type as it was. The figures below are the identities that experiment
folders made before that change carry, computed on commit ff7b910 with this file's
``_identities``: a regression fixture, not a figure to update when a test fails. Update them
only with a deliberate identity change (records.IDENTITY_VERSION), which retrains old trials.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from dwtune.core.records import grid_requests, trial_identity
from dwtune.core.spec import load_spec

SPECS = Path(__file__).resolve().parents[2] / "search_spaces"
# spec -> (grid trials, sha256 of their ids in order (16 hex digits), ids of the first cell at
# seed 1 with its own rate 1e-3, at seed 0 as a 50-step rate-search trial at 2e-3, and at seed 0
# with the training length doubled)
RECORDED = {
    "quickstart.yaml": (
        12,
        "6ca7ee7ba6a5b990",
        ("5ee4abe34d42d8b9", "8c876632c9d83c29", "6ea71d199b38b0d3"),
    ),
    "simulated.yaml": (
        63,
        "3acad1c0d8be8ed2",
        ("3abc32b12009bb2e", "eb7f16e8b749d473", "3016409c4dc2f982"),
    ),
    "simulated_hard.yaml": (
        126,
        "39b88b814c2f6ba5",
        ("80142a38d107b98a", "c1c487dba51c9302", "4f160f1da1f3ad06"),
    ),
    "simulated_lr_mup.yaml": (
        63,
        "22086519775b5534",
        ("82b3389946f2ef4b", "1220f9193cf8c237", "dc9efc7359cd7900"),
    ),
    "tiny_lr.yaml": (
        2,
        "c0129bebf44869ba",
        ("6a122f308a45da7c", "4b998eb7bebc6a5f", "07c333cead5fe2d1"),
    ),
    "gpu_pilot.yaml": (
        64,
        "39ba887ac66ea034",
        ("096c563b98642b9a", "0e530d1a387f4022", "e09febea24b921cc"),
    ),
    "paper.yaml": (
        39,
        "f9b7858e47e74947",
        ("1e230a6f8067c414", "ec15f44227db3f5d", "43b42916879bb814"),
    ),
}


def _identities(name: str) -> tuple[int, str, tuple[str, str, str]]:
    spec = load_spec(SPECS / name)
    ids = [request.trial_id for request in grid_requests(spec)]
    shape = spec.grid()[0].shape
    others = (
        trial_identity(spec, shape, 1, lr=1e-3),
        trial_identity(spec, shape, 0, lr=2e-3, search_steps=50),
        trial_identity(spec, shape, 0, length_factor=2.0),
    )
    return len(ids), hashlib.sha256(" ".join(ids).encode()).hexdigest()[:16], others


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_shipped_specs_name_the_trials_their_experiment_folders_recorded(name):
    assert _identities(name) == RECORDED[name]
