"""Command-line overrides of a spec: ``train.steps=100 space.seeds=3``.

Each ``KEY=VALUE`` sets one dotted key of the raw mapping before validation, so an override is
checked exactly as the same key in the YAML file (an unknown key gets the same did-you-mean) and
the trial identities follow the resolved spec. VALUE is read as YAML: ``100`` is a number,
``[6, 12]`` a list, ``{min: 1e6, max: 1e8, num: 5}`` a mapping, ``null`` clears a key. A key
whose field is text (``name``, ``train.schedule``, ...) keeps a scalar as written: YAML reads
``name=yes`` as the boolean true and ``name=1e3`` as a number, neither of which was meant.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable

import yaml

from dwtune.core.errors import ErrorCollector, InputError, shown
from dwtune.core.spec.checks import shape_problem

EXAMPLE = "train.steps=100"
MAX_OVERRIDE_CHARS = 10_000  # a value is a number, a name or a short list


def parse_override(text: str) -> tuple[list[str], object]:
    """``'train.steps=100'`` -> (``['train', 'steps']``, ``100``)."""
    key, sep, value = text.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(part.strip() for part in parts):
        raise InputError(f"override {shown(text)}: expected KEY=VALUE such as {EXAMPLE}")
    if len(text) > MAX_OVERRIDE_CHARS:
        raise InputError(f"override {key}: {len(text):,} characters; at most {MAX_OVERRIDE_CHARS}")
    try:
        parsed = yaml.safe_load(value) if value.strip() else ""
    except yaml.YAMLError:
        raise InputError(
            f"override {key}: got {shown(value)}; expected a YAML value such as 100, 3e-3, "
            f"[6, 12] or a name"
        ) from None
    problem = shape_problem(parsed)
    if problem:
        raise InputError(f"override {key}: {problem}; expected a number, a name or a short list")
    return [part.strip() for part in parts], parsed


def apply_overrides(
    raw: object, overrides: Iterable[str], text_keys: Collection[str] = ()
) -> object:
    """A copy of the raw spec mapping with every override set (all bad ones reported).
    ``text_keys``: dotted keys of text fields, whose scalar values are kept as written."""
    overrides = list(overrides)
    if not overrides or not isinstance(raw, dict):
        return raw
    raw = copy.deepcopy(raw)
    errors = ErrorCollector()
    for text in overrides:
        errors.attempt(_set, raw, text, text_keys)
    errors.raise_any()
    return raw


def _set(raw: dict[object, object], text: str, text_keys: Collection[str]) -> None:
    parts, value = parse_override(text)
    written = text.partition("=")[2].strip()
    boolean = written.lower() in ("true", "false")  # a text field reads these as "true"/"false"
    if ".".join(parts) in text_keys and isinstance(value, bool | int | float) and not boolean:
        value = written  # as written: yes stays "yes", 1e3 "1e3"
    node = raw
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            raise InputError(
                f"override {'.'.join(parts)}: {where} is {shown(child)}, not a section; "
                f"set {where}=VALUE instead"
            )
        node = child
    node[parts[-1]] = value
