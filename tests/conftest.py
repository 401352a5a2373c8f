"""Shared fixtures (small spec files written on demand) and the tiers' one hook: tests marked
``gpu`` are skipped where CUDA is missing. Shared helpers are in tests/helpers."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helpers.specs import small_simulated


@pytest.fixture(scope="session")
def write_spec(tmp_path_factory):
    """``write_spec(raw) -> Path`` of a YAML spec file holding ``raw``."""

    def write(raw: dict) -> Path:
        path = tmp_path_factory.mktemp("specs") / f"{raw['name']}.yaml"
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        return path

    return write


@pytest.fixture(scope="session")
def simulated_raw():
    """``simulated_raw(**sections) -> dict``: the small simulated study, adjusted."""
    return small_simulated


@pytest.hookimpl(trylast=True)  # after -m has deselected: torch is imported only if needed
def pytest_collection_modifyitems(config, items):
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if gpu and not _cuda_available():
        for item in gpu:
            item.add_marker(pytest.mark.skip(reason="needs CUDA"))


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()
