"""Parsing of human-written sizes (pure): ``1e6``, ``"1e6"``, ``"175B"``, ``"1.5T"``, ``"300k"``."""

from __future__ import annotations

import math
import re

from dwtune.core.errors import InputError, shown

SUFFIXES = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_NUMBER = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([kKMBGT]?)\s*$")


def parse_size(value: object, field: str = "budget") -> float:
    """A positive finite size from a number or a string such as ``"1e6"`` or ``"175B"``.

    PyYAML reads ``1e6`` (no dot) as a string; accepting it here is deliberate.
    """
    if isinstance(value, bool):
        raise InputError(
            f"{field}: got {shown(value)}; expected a positive number such as 1e6 or 175B"
        )
    if isinstance(value, int | float):
        number = float(value)
    else:
        match = _NUMBER.match(str(value))
        if not match:
            raise InputError(
                f"{field}: got {shown(value)}; expected a positive number such as 1e6, 3.5e5 "
                "or 175B"
            )
        number = float(match.group(1)) * SUFFIXES[match.group(2)]
    if not math.isfinite(number) or number <= 0:
        raise InputError(f"{field}: got {shown(value)}; expected a positive finite number")
    return number


def format_size(value: float) -> str:
    """Compact human form: 1.2e+05 -> '120K', 1.75e11 -> '175B'."""
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"
