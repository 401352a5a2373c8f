"""One set of tested versions (issue 49): pyproject.toml states ranges, constraints.txt pins what
the suite passes with, and every install the project documents or runs goes through it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]


def _pins() -> dict[str, str]:
    lines = (REPO / "constraints.txt").read_text().splitlines()
    pairs = [line.split("==", 1) for line in lines if line and not line.startswith("#")]
    return {name.lower(): version for name, version in pairs}


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    listed = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    return {Requirement(text).name.lower(): Requirement(text) for text in listed}


def test_torch_is_a_range_and_its_pin_lies_inside_it():
    torch = _requirements()["torch"]
    assert not any(spec.operator == "==" for spec in torch.specifier)
    assert _pins()["torch"] == "2.13.0"  # the CPU wheel a fresh clone installs, no CUDA build
    assert torch.specifier.contains(_pins()["torch"])


def test_every_requirement_is_pinned_within_its_range():
    pins = _pins()
    for name, requirement in _requirements().items():
        assert name.replace("_", "-") in {p.replace("_", "-") for p in pins}, name
        pinned = next(v for p, v in pins.items() if p.replace("_", "-") == name.replace("_", "-"))
        assert requirement.specifier.contains(pinned), f"{name}=={pinned} outside {requirement}"


def test_readme_commands_and_ci_install_through_the_constraints():
    readme = (REPO / "README.md").read_text()
    commands = re.search(r"```bash\n(.*?)```", readme, re.S).group(1).splitlines()
    assert len(commands) == 2
    assert all("pip install -c constraints.txt -e " in command for command in commands)
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci == commands[1]  # CI runs the README's test command verbatim
