"""Runs tables as plain columns, their validation and checkpoint selection (pure: numpy).

See :mod:`dwtune.core.analysis` for the conventions."""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dwtune.core.errors import InputError

# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class RunTable:
    """Plain columns of a runs table (rows aligned); ``row`` numbers rows for messages.

    ``names`` maps a role (depth, params, ...) to the source column it was read from.
    """

    depth: np.ndarray
    width: np.ndarray
    params: np.ndarray
    loss: np.ndarray  # nats; NaN only on failed rows
    row: np.ndarray  # 1-based row number in the source
    seed: np.ndarray | None = None
    tokens: np.ndarray | None = None
    step: np.ndarray | None = None
    run: np.ndarray | None = None  # run ids (any hashable)
    failed: np.ndarray | None = None  # bool: a training that diverged or failed
    names: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.depth.size)

    def take(self, index: np.ndarray) -> RunTable:
        """The rows at ``index``, every column alike."""
        picked: dict[str, Any] = {  # arrays, None for an absent optional column
            name: (None if value is None else np.asarray(value)[index])
            for name, value in self._columns().items()
        }
        return replace(self, **picked)

    def _columns(self) -> dict[str, np.ndarray | None]:
        names = ("depth", "width", "params", "loss", "row", "seed", "tokens", "step", "run")
        return {name: getattr(self, name) for name in (*names, "failed")}

    def is_failed(self) -> np.ndarray:
        return np.zeros(len(self), bool) if self.failed is None else np.asarray(self.failed, bool)

    def column_name(self, role: str) -> str:
        return self.names.get(role, role)


def _check_column(
    table: RunTable, role: str, values: np.ndarray, ok: np.ndarray, want: str
) -> None:
    bad = np.flatnonzero(~ok)
    if bad.size:
        i = int(bad[0])
        raise InputError(
            f"column {table.column_name(role)} row {int(table.row[i])}: got {float(values[i])!r}; "
            f"expected {want}"
        )


def validate(table: RunTable) -> None:
    """Finite positive depth, width, params; finite positive loss on runs that did not fail."""
    if len(table) == 0:
        raise InputError("the table has no rows; export the runs with their losses")
    for role in ("depth", "width", "params"):
        values = getattr(table, role)
        _check_column(table, role, values, np.isfinite(values) & (values > 0), "a number > 0")
    usable = ~table.is_failed()
    loss = table.loss
    ok = ~usable | (np.isfinite(loss) & (loss > 0))
    _check_column(table, "loss", loss, ok, "a finite loss > 0 (nats)")
    for role in ("seed", "tokens", "step"):
        values = getattr(table, role)
        if values is not None:
            _check_column(table, role, values, np.isfinite(values), "a finite number")


# --------------------------------------------------------------------------- checkpoints


@dataclass(frozen=True)
class Checkpoints:
    """Which checkpoint of each run was used: ``last`` or ``nearest`` to ``tokens``."""

    rule: str  # "last" or "nearest"
    target: float | None  # tokens asked for (nearest)
    order: str  # column that orders checkpoints: tokens, step or "row"
    runs: int
    rows: int  # rows in the table
    picked_low: float | None = None  # range of the ordering column over the picked rows
    picked_high: float | None = None

    def describe(self) -> str:
        if self.rows == self.runs:
            return f"{self.runs} runs, one row each"
        picked = ""
        if self.picked_low is not None:
            picked = f" (picked {self.order} {self.picked_low:.4g} to {self.picked_high:.4g})"
        which = (
            f"checkpoint nearest to {self.target:.4g} tokens"
            if self.rule == "nearest"
            else "last checkpoint"
        )
        return f"{self.runs} runs in {self.rows} rows: each run's {which}{picked}"


def run_keys(table: RunTable) -> list[Hashable]:
    """One key per row naming its run: the run column; else, where tokens or steps order
    checkpoints, depth, width, params and seed; else every row is a run of its own."""
    if table.run is not None:
        return list(table.run)
    if table.tokens is None and table.step is None:
        return list(range(len(table)))
    seeds = table.seed if table.seed is not None else np.zeros(len(table))
    return list(zip(table.depth, table.width, table.params, seeds, strict=True))


def run_codes(table: RunTable) -> np.ndarray:
    """One int per row naming its run (as :func:`run_keys` does), numbered 0, 1, ... in the
    order runs first appear. Sorted in numpy where the key columns are numbers: a dict of a
    million row tuples costs seconds."""
    if table.run is not None or (table.tokens is None and table.step is None):
        seen: dict[Hashable, int] = {}
        return np.array([seen.setdefault(k, len(seen)) for k in run_keys(table)], dtype=np.int64)
    seeds = table.seed if table.seed is not None else np.zeros(len(table))
    columns = [np.asarray(c, dtype=float) for c in (table.depth, table.width, table.params, seeds)]
    rows = np.lexsort(columns[::-1])  # stable: each run's rows in table order, first first
    starts = np.zeros(rows.size, bool)
    starts[:1] = True
    for column in columns:  # a row starts a run where any key differs (NaN never equals)
        ordered = column[rows]
        starts[1:] |= ~(ordered[1:] == ordered[:-1])
    sorted_code = np.cumsum(starts) - 1
    rank = np.empty(int(starts.sum()), dtype=np.int64)
    rank[np.argsort(rows[starts], kind="stable")] = np.arange(rank.size)  # by first row
    codes = np.empty(rows.size, dtype=np.int64)
    codes[rows] = rank[sorted_code]
    return codes


def run_groups(table: RunTable) -> dict[Hashable, list[int]]:
    """run key -> the indices of its rows (its checkpoints), in table order; runs in the order
    they first appear."""
    codes = run_codes(table)
    rows = np.argsort(codes, kind="stable")  # stable: each run's rows stay in table order
    starts = np.flatnonzero(np.diff(codes[rows], prepend=-1))
    keys = run_keys(table) if table.run is not None else None
    groups: dict[Hashable, list[int]] = {}
    for index in np.split(rows, starts[1:]):
        first = int(index[0])
        groups[keys[first] if keys is not None else _key_at(table, first)] = index.tolist()
    return groups


def _key_at(table: RunTable, i: int) -> Hashable:
    """:func:`run_keys` of row ``i`` alone (a table without a run column)."""
    if table.tokens is None and table.step is None:
        return i
    seed = table.seed[i] if table.seed is not None else np.float64(0.0)
    return (table.depth[i], table.width[i], table.params[i], seed)


def checkpoint_order(table: RunTable) -> tuple[str, np.ndarray]:
    """The column that orders checkpoints (tokens, else step, else "" for row order) and its
    values."""
    name = "tokens" if table.tokens is not None else "step" if table.step is not None else ""
    return name, getattr(table, name) if name else np.arange(len(table), dtype=float)


def pick_checkpoint(index: list[int], order: np.ndarray, target: float | None) -> int:
    """The used row of one run: the last checkpoint, or the one nearest ``target`` tokens."""
    if target is None:  # the latest checkpoint; of two at once, the later row
        rows = np.asarray(index)
        values = order[rows]
        return int(rows[values == values.max()].max())
    return min(
        index, key=lambda i: (abs(math.log(max(float(order[i]), 1e-300) / target)), -order[i])
    )


def select_checkpoints(
    table: RunTable, tokens: float | None = None
) -> tuple[RunTable, Checkpoints]:
    """The used row of each run (module doc) and a description of the choice."""
    if tokens is not None and table.tokens is None:
        have = (
            f"; the table has {table.column_name('step')} (steps, not tokens)"
            if (table.step is not None)
            else ""
        )
        raise InputError(
            f"--tokens needs a tokens column{have}; map one with --columns tokens=COLUMN"
        )
    order_name, order = checkpoint_order(table)
    groups = run_groups(table)
    chosen = np.array(
        sorted(pick_checkpoint(ix, order, tokens) for ix in groups.values()), dtype=int
    )
    picked = order[chosen] if order_name else None
    info = Checkpoints(
        rule="nearest" if tokens is not None else "last",
        target=tokens,
        order=order_name or "row",
        runs=len(groups),
        rows=len(table),
        picked_low=float(picked.min()) if picked is not None else None,
        picked_high=float(picked.max()) if picked is not None else None,
    )
    return table.take(chosen), info


def run_name(table: RunTable, i: int) -> str:
    """How messages name the run of row ``i``: its run id, else its shape and seed."""
    if table.run is not None:
        return str(table.run[i])
    seed = f" seed {int(table.seed[i])}" if table.seed is not None else ""
    return f"depth {table.depth[i]:g} N {table.params[i]:.3g}{seed}"
