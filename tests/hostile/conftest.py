"""The hostile suite's experiment: built once per session, a private copy for each case."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers.hostile_experiment import build_experiment


@pytest.fixture(scope="session")
def built_experiment(tmp_path_factory) -> Path:
    """Grid and refine stages done in-process, exported and reported (read it, never write)."""
    return build_experiment(tmp_path_factory.mktemp("hostile-base"))


@pytest.fixture
def experiment(built_experiment, tmp_path) -> Path:
    """A private copy of the built experiment: ``<copy>/experiments/hostile`` and the spec."""
    copy_root = tmp_path / "case"
    shutil.copytree(built_experiment, copy_root, symlinks=True)
    return copy_root
