"""The oracle floor of a study (pure): what its answer would cost if N* were already known.

An oracle that knows each pair's transition trains the pair's two depths once, at the reference
law's N* of the pair (``transition_size(law, deeper depth)``, paper convention 12·L·dx²), with
as many paired seeds as the study's deciding stage trains at one size: ``refine.seeds`` when
the spec has refine pairs, else ``space.seeds`` (the grid alone then decides). Nothing cheaper
can measure a sign of Δ at N*, so

    η = floor FLOPs ÷ planned FLOPs (``dwtune plan --cost``) or ÷ spent FLOPs (the report)

is how close a design comes to the limit (1 = no training beyond the oracle's).

Each net's width is solved at N* on the spec's size axis (its size convention), as the grid
solves its cells; a ``space.compare: flops`` study is priced at equal parameters here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dwtune.core.budget import (
    GridCell,
    ModelShape,
    size_of,
    solve_width,
    training_flops,
    width_step,
)
from dwtune.core.errors import InputError
from dwtune.core.projection import DepthWidthLaw, transition_size
from dwtune.core.scale import study_pairs
from dwtune.core.spec import ExperimentSpec


@dataclass(frozen=True)
class PairFloor:
    """One pair's share of the floor: both depths x ``seeds`` trained once at ``n_star``."""

    shallow: int
    deep: int
    n_star: float  # the reference law's N* of the pair (parameters, paper convention)
    width_shallow: int
    width_deep: int
    trainings: int
    flops: float


@dataclass(frozen=True)
class OracleFloor:
    law: str
    seeds: int  # paired seeds per pair (refine.seeds, or space.seeds without refine pairs)
    pairs: tuple[PairFloor, ...]

    @property
    def flops(self) -> float:
        return sum(p.flops for p in self.pairs)

    @property
    def trainings(self) -> int:
        return sum(p.trainings for p in self.pairs)

    @property
    def trainings_per_pair(self) -> float:
        return 2.0 * self.seeds


def floor_seeds(spec: ExperimentSpec) -> int:
    """Paired seeds the deciding stage trains at one size (see the module docstring)."""
    return spec.refine.seeds if spec.refine.pairs else len(spec.space.seeds)


def net_at(spec: ExperimentSpec, depth: int, n_star: float) -> GridCell:
    """The net of ``depth`` layers at size ``n_star``, solved as the grid solves its cells; the
    narrowest legal net where ``n_star`` is below it (the oracle cannot train a smaller one)."""
    model = spec.model

    def solve(size: float) -> GridCell:
        return solve_width(
            spec.shape_template(),
            depth,
            size,
            model.width_multiple,
            model.size_convention,
            head_dim=model.head_dim,
        )

    try:
        return solve(n_star)
    except InputError:  # too small for the narrowest width at this depth
        narrowest = spec.shape_at(
            depth, width_step(model.head_dim or model.heads, model.width_multiple)
        )
        return solve(size_of(narrowest, model.size_convention))


def oracle_floor(
    spec: ExperimentSpec,
    law: DepthWidthLaw,
    flops_of: Callable[[GridCell], float] | None = None,
) -> OracleFloor:
    """The floor of ``spec`` under ``law``; ``flops_of`` prices one training of a cell
    (default: the spec's training FLOPs, evaluation excluded)."""
    price = flops_of or (lambda cell: spec.training_flops(cell.shape))
    seeds = floor_seeds(spec)
    pairs = []
    for shallow, deep in study_pairs(spec):
        n_star = transition_size(law, deep)
        low, high = net_at(spec, shallow, n_star), net_at(spec, deep, n_star)
        pairs.append(
            PairFloor(
                shallow=shallow,
                deep=deep,
                n_star=n_star,
                width_shallow=low.shape.width,
                width_deep=high.shape.width,
                trainings=2 * seeds,
                flops=seeds * (price(low) + price(high)),
            )
        )
    return OracleFloor(law=law.name, seeds=seeds, pairs=tuple(pairs))


def efficiency(floor_flops: float, spent_flops: float) -> float:
    """η = floor ÷ spent (or planned) FLOPs; NaN when nothing is spent."""
    return floor_flops / spent_flops if spent_flops > 0 else math.nan


def spent_flops(template: ModelShape, trials: Iterable[tuple[int, int, int, float]]) -> float:
    """Training FLOPs of finished or stopped trainings given as (depth, width, heads, tokens),
    on the spec's shape ``template`` (vocabulary, sequence length, MLP ratio); a training
    with no finite token count adds nothing."""
    total = 0.0
    for depth, width, heads, tokens in trials:
        if not math.isfinite(tokens) or tokens <= 0:
            continue
        shape = dataclasses.replace(template, depth=int(depth), width=int(width), heads=int(heads))
        total += training_flops(shape, tokens)
    return total
