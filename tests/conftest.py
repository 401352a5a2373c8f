"""Shared fixtures: small spec files written on demand; processes read from /proc."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml

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


class Processes:
    """This machine's processes, read from /proc (Linux), to find and stop what a test started."""

    @staticmethod
    def table() -> dict[int, tuple[int, str]]:
        """pid -> (parent pid, command line)."""
        table = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:  # exited while we looked
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            table[int(entry.name)] = (ppid, cmdline.decode(errors="replace"))
        return table

    @staticmethod
    def descendants(roots: set[int], table: dict[int, tuple[int, str]]) -> list[int]:
        """``roots`` and every process below them."""
        found, frontier = set(roots), set(roots)
        while frontier:
            frontier = {pid for pid, (ppid, _) in table.items() if ppid in frontier} - found
            found |= frontier
        return sorted(found)

    @staticmethod
    def alive(pid: int) -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        return state != "Z"

    @classmethod
    def children_named(cls, prefix: str, root: int | None = None) -> list[int]:
        """Live processes below ``root`` (default: this one) whose command line starts so."""
        table = cls.table()
        below = cls.descendants({root or os.getpid()}, table)
        return [
            pid for pid in below if table.get(pid, (0, ""))[1].startswith(prefix) and cls.alive(pid)
        ]
