"""Value checks shared by the spec sections: each raises one InputError line naming the field."""

from __future__ import annotations

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


def nesting_depth(value: object, limit: int, depth: int = 0) -> int:
    """How deeply lists and mappings nest in ``value``, counting no further than ``limit``+1."""
    if depth > limit or not isinstance(value, dict | list | tuple):
        return depth
    children = value.values() if isinstance(value, dict) else value
    return max((nesting_depth(c, limit, depth + 1) for c in children), default=depth + 1)


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
