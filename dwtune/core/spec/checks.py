"""Value checks shared by the spec sections: each raises one InputError line naming the field."""

from __future__ import annotations

import math

from dwtune.core.errors import InputError


def at_least(name: str, value: float, minimum: float) -> None:
    if not math.isfinite(value) or value < minimum:
        raise InputError(f"{name}: got {value!r}; expected a value >= {minimum}")


def within(name: str, value: float, low: float, high: float) -> None:
    if not (math.isfinite(value) and low <= value <= high):
        raise InputError(f"{name}: got {value!r}; expected {low} <= x <= {high}")


def positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"{name}: got {value!r}; expected a positive finite number")


def one_of(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InputError(f"{name}: got {value!r}; expected one of {', '.join(choices)}")


def as_plain(value: object) -> object:
    if isinstance(value, dict):
        return {k: as_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_plain(v) for v in value]
    return value


# --------------------------------------------------------------------------- raw YAML -> configs
