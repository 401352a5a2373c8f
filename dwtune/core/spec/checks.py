"""Value checks shared by the spec sections: each raises one InputError line naming the field."""

from __future__ import annotations

import dataclasses
import math

from dwtune.core.errors import InputError, shown
from dwtune.core.spec import limits


def _is_finite(value: float) -> bool:
    """Finite; an int of any size is (math.isfinite would overflow converting it)."""
    return isinstance(value, int) or math.isfinite(value)


def at_least(name: str, value: float, minimum: float) -> None:
    if not _is_finite(value) or value < minimum:
        raise InputError(f"{name}: got {shown(value)}; expected a value >= {minimum}")


def within(name: str, value: float, low: float, high: float) -> None:
    if not (_is_finite(value) and low <= value <= high):
        raise InputError(f"{name}: got {shown(value)}; expected {low} <= x <= {high}")


def positive(name: str, value: float) -> None:
    if not (_is_finite(value) and value > 0):
        raise InputError(f"{name}: got {shown(value)}; expected a positive finite number")


def at_most(name: str, value: float, maximum: float) -> None:
    """Refuse a count or size above its documented maximum (dwtune.core.spec.limits)."""
    if not _is_finite(value) or value > maximum:
        raise InputError(f"{name}: got {shown(value)}; the maximum is {maximum:g} (see limits)")


def length_factors(name: str, factors: tuple[float, ...]) -> None:
    """Factors on the training length: a few, distinct, finite, within the limits, not 1."""
    at_most(f"{name} (entries)", len(factors), limits.MAX_LENGTH_FACTORS)
    top = limits.MAX_LENGTH_FACTOR
    for factor in factors:
        if not (_is_finite(factor) and 1 / top <= factor <= top) or factor == 1:
            raise InputError(
                f"{name}: got {shown(factor)}; expected factors on the training length in "
                f"[{1 / top:g}, {top:g}] other than 1, e.g. [0.5, 2.0]"
            )
    if len(set(factors)) != len(factors):
        raise InputError(f"{name}: got {list(factors)}; list each factor once")


@dataclasses.dataclass(frozen=True)
class Shape:
    """How large a parsed value is once YAML aliases are expanded, each count capped just
    above its limit (so a count stays a small int however large the expansion)."""

    depth: int  # levels of nested lists and mappings
    values: int  # scalars, lists and mappings, an alias counted as a copy of what it names


def measure(value: object, max_depth: int, max_values: int = limits.MAX_SPEC_VALUES) -> Shape:
    """The expanded :class:`Shape` of ``value``, visiting each distinct list or mapping once.

    Why once: YAML aliases share one object, so a few hundred bytes can name 10^9 values (the
    "billion laughs"); a walk that follows every alias, as any check, copy or message that
    expands the value would, never ends. A value that contains itself is deeper than any limit.
    """
    known: dict[int, Shape] = {}
    open_: set[int] = set()
    too_deep = Shape(max_depth + 1, max_values + 1)

    def walk(node: object, level: int) -> Shape:
        if not isinstance(node, dict | list | tuple):
            return Shape(0, 1)
        if id(node) in known:
            return known[id(node)]
        if id(node) in open_ or level > max_depth:  # a cycle, or already too deep to matter
            return too_deep
        open_.add(id(node))
        children = [*node.keys(), *node.values()] if isinstance(node, dict) else node
        depth, values = 0, 1
        for child in children:
            inner = walk(child, level + 1)
            depth = max(depth, inner.depth)
            values = min(values + inner.values, max_values + 1)
        open_.discard(id(node))
        known[id(node)] = shape = Shape(min(depth + 1, max_depth + 1), values)
        return shape

    return walk(value, 0)


def nesting_depth(value: object, limit: int) -> int:
    """How deeply lists and mappings nest in ``value``, counting no further than ``limit``+1."""
    return measure(value, limit, max_values=2**62).depth


def shape_problem(value: object) -> str | None:
    """What makes a parsed spec (file, override value or stored copy) too large to judge, or
    None: nested deeper than MAX_NESTING, or more than MAX_SPEC_VALUES values once its
    aliases are expanded."""
    shape = measure(value, limits.MAX_NESTING)
    if shape.depth > limits.MAX_NESTING:
        return f"nested deeper than {limits.MAX_NESTING} levels"
    if shape.values > limits.MAX_SPEC_VALUES:
        return (
            f"more than {limits.MAX_SPEC_VALUES:,} values once its YAML aliases (*name) are "
            f"expanded"
        )
    return None


def one_of(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InputError(f"{name}: got {shown(value)}; expected one of {', '.join(choices)}")


def as_plain(value: object) -> object:
    if isinstance(value, dict):
        return {k: as_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_plain(v) for v in value]
    return value


# --------------------------------------------------------------------------- raw YAML -> configs
