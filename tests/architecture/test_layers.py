"""The layer contracts in pyproject.toml bite: a planted forbidden import breaks its contract.

That the shipped tree keeps them is checked by `lint-imports` in the README's test command."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))


def _lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [LINT_IMPORTS, "--config", str(root / "pyproject.toml")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(root)},
    )


def _copy_of_the_package(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(REPO / "dwtune", root / "dwtune", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("core/fit/wls.py", "import torch", "The pure core imports none of"),
        ("core/budget.py", "import dwtune.study.refine", "Layers:"),
        ("outputs/tensorboard.py", "import ray", "Only the Ray runner imports ray"),
        ("study/progress.py", "import torch", "Only the PyTorch backend imports torch"),
        ("outputs/analysis_text.py", "import dwtune.backends.trial", "Outputs (renderers) and"),
        ("storage/tables.py", "import optuna", "Only the study layer imports optuna"),
        ("storage/tables.py", "import matplotlib", "Only the renderers (outputs) import"),
        ("outputs/analysis_text.py", "import pyarrow", "Only storage and the corpus reader"),
        ("commands/report.py", "import dwtune.commands.export", "Commands import no other command"),
        ("core/budget.py", "import dwtune.core.fit", "Core: oracle_floor, sharding > consumers"),
        (
            "core/records.py",
            "import dwtune.core.refine.points",
            "Core: oracle_floor, sharding > consumers",
        ),
        # the refine package's inside order: the sign rule knows nothing of the step policy
        ("core/refine/signs.py", "import dwtune.core.refine.steps", "Refine: transition"),
        ("core/refine/stick.py", "import dwtune.core.refine.estimate", "Refine: transition"),
    ],
)
def test_a_forbidden_import_breaks_its_contract(tmp_path, module, line, contract):
    root = _copy_of_the_package(tmp_path)
    path = root / "dwtune" / module
    path.write_text(path.read_text() + f"\n{line}  # planted by the test\n")
    result = _lint(root)
    assert result.returncode != 0
    # Only the broken contracts are listed after this heading.
    broken_section = result.stdout.partition("Broken contracts")[2]
    assert contract in broken_section, result.stdout
