"""pair_deltas.parquet: every paired Δ the refine stage measured, one row per (pair, point, seed).

The study bootstrap (:mod:`dwtune.core.fit.bootstrap`) resamples seeds jointly across pairs and
re-estimates each pair's transition, so it needs the Δs themselves, not only the transitions.
The refine stage writes this table beside transitions.parquet; the report reads it back as
per-pair DeltaPoints. A study without it (older directories, published tables) gets no
bootstrap, and the report says so.

Columns: pair, depth_shallow, depth_deep, n (the pair's size axis, parameters), seed, delta
(nats; ±inf for a failed training of one side), extra_sd (nats, shared by the point's Δs),
simulated, failures_deep / failures_shallow (the point's failed, diverged or unstable trainings
of each net), unstable ("deep", "shallow", "deepshallow" or "": which of this seed's two
trainings the instability rule flagged, :mod:`dwtune.core.pair_points`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from dwtune.core.crossing import DeltaPoint
from dwtune.core.fit.bootstrap import PairPoints
from dwtune.core.vocabulary import PAIR_DELTAS_FILE
from dwtune.storage.provenance import read_parquet_checked, write_parquet_atomic
from dwtune.storage.schemas import PAIR_DELTAS_REQUIRED, PAIR_DELTAS_SCHEMA

__all__ = ["PAIR_DELTAS_FILE", "read_pair_deltas", "write_pair_deltas"]


def _rows(pair: PairPoints, simulated: bool) -> list[dict]:
    rows = []
    for point in pair.points:
        count = len(point.deltas)
        seeds = point.seeds if len(point.seeds) == count else (None,) * count
        flags = point.unstable or ("",) * count
        for seed, delta, flag in zip(seeds, point.deltas, flags, strict=True):
            rows.append(
                {
                    "pair": pair.label,
                    "depth_shallow": int(pair.depth_shallow),
                    "depth_deep": int(pair.depth_deep),
                    "n": float(point.n),
                    "seed": seed,
                    "delta": float(delta),
                    "extra_sd": float(point.extra_sd),
                    "simulated": simulated,
                    "failures_deep": point.failures_deep,
                    "failures_shallow": point.failures_shallow,
                    "unstable": flag,
                }
            )
    return rows


def write_pair_deltas(
    pairs: Sequence[PairPoints], path: Path, spec: dict | None, simulated: bool
) -> Path:
    rows = [row for pair in pairs for row in _rows(pair, simulated)]
    table = pa.Table.from_pylist(rows, schema=PAIR_DELTAS_SCHEMA)
    return write_parquet_atomic(table, path, spec)


def _failures(at) -> dict:
    """A point's failure counts and unstable flags (absent in tables written before them)."""
    found: dict = {}
    for column in ("failures_deep", "failures_shallow"):
        if column in at and at[column].notna().all():
            found[column] = int(at[column].iloc[0])
    if "unstable" in at and at["unstable"].notna().all() and (at["unstable"] != "").any():
        found["unstable"] = tuple(str(v) for v in at["unstable"])
    return found


def read_pair_deltas(path: Path) -> list[PairPoints]:
    """Per pair (in the table's order) its DeltaPoints sorted by size."""
    frame = read_parquet_checked(path, PAIR_DELTAS_REQUIRED).to_pandas()
    pairs = []
    for label, rows in frame.groupby("pair", sort=False):
        points = []
        for n, at in rows.groupby("n", sort=True):
            seeds = tuple(int(s) for s in at["seed"]) if at["seed"].notna().all() else ()
            extra = float(at["extra_sd"].iloc[0]) if "extra_sd" in at else 0.0
            points.append(
                DeltaPoint(
                    float(n),
                    tuple(float(d) for d in at["delta"]),
                    extra_sd=extra if math.isfinite(extra) else 0.0,
                    seeds=seeds,
                    **_failures(at),
                )
            )
        first = rows.iloc[0]
        depths = int(first["depth_shallow"]), int(first["depth_deep"])
        pairs.append(PairPoints(str(label), *depths, tuple(points)))
    return pairs
