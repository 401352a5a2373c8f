"""This machine's processes, read from /proc, to find and stop what a test started."""

from __future__ import annotations

import os
from pathlib import Path


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
