"""The spec sections' pydantic vocabulary: what a field coerces, accepts, and how it fails.

A section is a frozen pydantic dataclass marked ``section``, validated on every construction
(the loader's, a ``dataclasses.replace``). A field's type names its coercion (``Int`` takes
``1e3``, which PyYAML reads as text; ``Budgets`` takes ``175B`` and ``{min, max, num}``), its
``Rule``s what it accepts (not JSON Schema keywords: the schema shows an editor the forms).
A failure is one line naming the field, the value and what would be accepted; a section's lines
come together, an unknown key's with the closest valid key.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import numbers
import typing
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import (
    BeforeValidator,
    ConfigDict,
    GetCoreSchemaHandler,
    ValidationError,
    WithJsonSchema,
)
from pydantic.dataclasses import dataclass
from pydantic_core import core_schema

from dwtune.core.errors import InputError, InputErrors, shown
from dwtune.core.spec import checks, limits
from dwtune.core.units import parse_size

T = TypeVar("T")


class FieldError(ValueError):
    """A field's bad value (a ValueError, so pydantic gathers them), each message after the
    field's dotted name: ``': got 0; …'``, ``'.num: got …'``, ``' (entries): got …'``."""

    def __init__(self, *messages: str) -> None:
        super().__init__(messages[0])
        self.messages = messages


def _relative(check: Callable[..., T], *args: Any) -> T:
    """``check('', *args)``, its InputError (named relative to the field) as a FieldError."""
    try:
        return check("", *args)
    except InputError as error:
        raise FieldError(*(str(e) for e in getattr(error, "errors", [error]))) from None


# --------------------------------------------------------------------------- coercions


def as_int(name: str, value: object) -> int:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    number = parse_size(value, name) if isinstance(value, str) else value
    if isinstance(number, float) and number.is_integer():
        return int(number)
    raise InputError(f"{name}: got {shown(value)}; expected an integer")


def as_float(name: str, value: object) -> float:
    if isinstance(value, bool):
        raise InputError(f"{name}: got {shown(value)}; expected a number")
    try:  # "3e-3": PyYAML leaves exponents without a dot as text
        number = float(value) if isinstance(value, numbers.Real) else float(str(value))
    except (ValueError, OverflowError):
        raise InputError(f"{name}: got {shown(value)}; expected a number such as 3e-3") from None
    if not math.isfinite(number):  # .nan, .inf, "inf": refused everywhere
        raise InputError(f"{name}: got {shown(value)}; expected a finite number")
    return number


def as_bool(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    raise InputError(f"{name}: got {shown(value)}; expected true or false")


def as_str(name: str, value: object) -> str:
    if isinstance(value, str | int | float):  # YAML `compile: true` for a string field: "true"
        return str(value).lower() if isinstance(value, bool) else str(value)
    raise InputError(f"{name}: got {shown(value)}; expected a string")


def list_of(name: str, value: object) -> list[object]:
    if not isinstance(value, list | tuple):
        raise InputError(f"{name}: got {shown(value)}; expected a list")
    return list(value)


def coerce(convert: Callable[[str, Any], object], optional: bool = False) -> BeforeValidator:
    """A field's raw value through ``convert(name, value)``; a scalar's null only if
    ``optional``."""

    def validate(value: object) -> object:
        if value is None and optional:
            return None
        if value is None and convert in SCALARS:
            raise FieldError(": got null; expected a value")
        return _relative(convert, value)

    return BeforeValidator(validate)


def _or_text(*kinds: str) -> WithJsonSchema:
    """The JSON Schema of a number field: its kinds, or a size written as YAML text."""
    return WithJsonSchema({"anyOf": [*({"type": kind} for kind in kinds), SIZE_TEXT]})


# A size or count written as YAML text: 175B, 1e6 (PyYAML reads 1e6 without a dot as text), 3.5M
SIZE_TEXT = {"type": "string", "pattern": r"^\s*[0-9.]+([eE][+-]?[0-9]+)?\s*[KMBTkmbt]?\s*$"}
SIZE = {"anyOf": [{"type": "number"}, SIZE_TEXT]}
SIZES = {"type": "array", "items": SIZE}
SCALARS = (as_int, as_float, as_bool, as_str)
Int = Annotated[int, coerce(as_int), _or_text("integer")]
OptInt = Annotated[int | None, coerce(as_int, optional=True), _or_text("integer", "null")]
Float = Annotated[float, coerce(as_float), _or_text("number")]
OptFloat = Annotated[float | None, coerce(as_float, optional=True), _or_text("number", "null")]
Bool = Annotated[bool, coerce(as_bool)]
Str = Annotated[str, coerce(as_str)]
OptStr = Annotated[str | None, coerce(as_str, optional=True)]


# --------------------------------------------------------------------------- rules


class Rule:
    """``check(name, value, *args)`` (raising InputError) on a set field value: Annotated
    metadata run after the field's coercion, or one of the rules ``each`` runs per entry."""

    def __init__(self, check: Callable[..., object], *args: Any) -> None:
        self.check, self.args = check, args

    def __call__(self, name: str, value: object) -> None:
        if value is not None:
            self.check(name, value, *self.args)

    def _validate(self, value: T) -> T:
        _relative(self, value)
        return value

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self._validate, handler(source))


def _each(name: str, values: tuple[object, ...], rules: tuple[Rule, ...]) -> None:
    for value in values:
        for rule in rules:
            rule(name, value)


def _entries(name: str, values: tuple[object, ...], maximum: int, what: str) -> None:
    checks.at_most(f"{name} ({what})", len(values), maximum)


def _distinct(name: str, values: tuple[object, ...], what: str) -> None:
    if len(set(values)) != len(values):
        raise InputError(f"{name}: got {list(values)}; expected distinct {what}")


def _expect(name: str, value: object, test: Callable[[Any], bool], expected: str) -> None:
    if not test(value):
        raise InputError(f"{name}: got {shown(value)}; expected {expected}")


least = functools.partial(Rule, checks.at_least)
most = functools.partial(Rule, checks.at_most)
within = functools.partial(Rule, checks.within)
positive = Rule(checks.positive)
distinct = functools.partial(Rule, _distinct)
expect = functools.partial(Rule, _expect)  # expect(test, "what is expected")


def choice(choices: tuple[str, ...]) -> Rule:
    return Rule(checks.one_of, choices)


def entries(maximum: int, what: str = "entries") -> Rule:
    return Rule(_entries, maximum, what)


def each(*rules: Rule) -> Rule:
    return Rule(_each, rules)


# --------------------------------------------------------------------------- list forms


def _budgets(name: str, value: object) -> tuple[float, ...]:
    """A list of sizes, or ``{min, max, num}`` log-spaced inclusive."""
    if not isinstance(value, dict):
        budgets = tuple(sorted({parse_size(v, name) for v in list_of(name, value)}))
        if not budgets:
            raise InputError(f"{name}: got an empty list; expected sizes such as [1e5, 1e6]")
        return budgets
    unknown = [unknown_key(name, key, ["min", "max", "num"]) for key in value]
    if any(unknown):
        raise InputErrors([error for error in unknown if error])
    if set(value) != {"min", "max", "num"}:
        raise InputError(f"{name}: got {shown(value)}; expected keys min, max and num")
    low, high = parse_size(value["min"], f"{name}.min"), parse_size(value["max"], f"{name}.max")
    num = as_int(f"{name}.num", value["num"])
    checks.at_most(f"{name}.num", num, limits.MAX_BUDGETS)  # before the list is made
    checks.at_most(f"{name}.max", high, limits.MAX_BUDGET)
    if num < 1 or high < low or (num == 1 and high != low):
        raise InputError(f"{name}: got {shown(value)}; expected min <= max and num >= 1")
    ratio = (high / low) ** (1 / (num - 1)) if num > 1 else 1.0
    return tuple(float(f"{low * ratio**i:.6g}") for i in range(num))


def _seeds(name: str, value: object) -> tuple[int, ...]:
    """A list of seeds, or a count n meaning 0..n-1."""
    if isinstance(value, list | tuple | range):
        seeds = tuple(as_int(name, v) for v in value)
        if not seeds:
            raise InputError(f"{name}: got nothing; expected a count >= 1 or a list of seeds")
        return seeds
    count = as_int(name, value)
    checks.at_most(f"{name} (count)", count, limits.MAX_SEEDS)  # before the range is made
    if count < 1:
        raise InputError(f"{name}: got {shown(value)}; expected a count >= 1 or a list of seeds")
    return tuple(range(count))


def _depths(name: str, value: object) -> tuple[int, ...]:
    depths = tuple(as_int(name, v) for v in list_of(name, value))
    if not depths:
        raise InputError(f"{name}: got an empty list; expected depths such as [1, 2, 4]")
    return depths


def _pairs(name: str, value: object) -> tuple[tuple[int, ...], ...]:
    pairs = []
    for pair in list_of(name, value):
        if not isinstance(pair, list | tuple):
            raise InputError(f"{name}: got {shown(pair)}; expected [shallower, deeper] pairs")
        pairs.append(tuple(as_int(name, v) for v in pair))
    checks.at_most(f"{name} (entries)", len(pairs), limits.MAX_PAIRS)
    for pair in pairs:
        if len(pair) != 2 or pair[0] >= pair[1]:
            raise InputError(f"{name}: got {list(pair)}; expected [shallower, deeper] depths")
    return tuple(pairs)


RANGE = {  # budgets: {min, max, num}
    "type": "object",
    "additionalProperties": False,
    "required": ["min", "max", "num"],
    "properties": {"min": SIZE, "max": SIZE, "num": {"type": "integer", "minimum": 1}},
}
COUNT_OR_LIST = [{"type": "integer", "minimum": 1}, {"type": "array", "items": {"type": "integer"}}]
Depths = Annotated[
    tuple[int, ...],
    coerce(_depths),
    WithJsonSchema({"type": "array", "items": {"type": "integer", "minimum": 1}}),
]
Budgets = Annotated[tuple[float, ...], coerce(_budgets), WithJsonSchema({"anyOf": [SIZES, RANGE]})]
Seeds = Annotated[tuple[int, ...], coerce(_seeds), WithJsonSchema({"anyOf": COUNT_OR_LIST})]
Pairs = Annotated[tuple[tuple[int, int], ...], coerce(_pairs)]
Sizes = Annotated[
    tuple[float, ...],
    coerce(lambda name, v: tuple(parse_size(s, name) for s in list_of(name, v))),
    WithJsonSchema(SIZES),
]
Floats = Annotated[
    tuple[float, ...], coerce(lambda name, v: tuple(as_float(name, f) for f in list_of(name, v)))
]
Strs = Annotated[
    tuple[str, ...], coerce(lambda name, v: tuple(as_str(name, s) for s in list_of(name, v)))
]


# --------------------------------------------------------------------------- sections

_Section = TypeVar("_Section", bound=type)


@typing.dataclass_transform(frozen_default=True)
def section(name: str) -> Callable[[_Section], _Section]:
    """The spec's section ``name``: a frozen pydantic dataclass refusing unknown keys, whose
    failed construction (the loader's or a ``dataclasses.replace``) raises an InputError, one
    line per problem."""

    def make(cls: _Section) -> _Section:
        cls = dataclass(frozen=True, config=ConfigDict(extra="forbid"))(cls)  # type: ignore[assignment]
        init: Callable[..., None] = cls.__dict__["__init__"]  # pydantic's, which validates

        @functools.wraps(init)
        def __init__(self: object, *args: object, **kwargs: object) -> None:
            try:
                init(self, *args, **kwargs)
            except ValidationError as error:
                raise as_input_error(cls, error, list(kwargs)) from None

        cls.__init__ = __init__  # type: ignore[misc]
        cls.section = name  # type: ignore[attr-defined]
        return cls

    return make


def build(cls: type[T], raw: object) -> T:
    """Section ``cls`` from its raw YAML mapping; every problem of it in one InputError."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InputError(f"{_name(cls)}: got {shown(raw)}; expected a mapping of keys to values")
    try:
        return typing.cast("T", cls.__pydantic_validator__.validate_python(raw))  # type: ignore[attr-defined]
    except ValidationError as error:
        raise as_input_error(cls, error, list(raw)) from None


def _name(cls: type) -> str:
    return typing.cast("str", getattr(cls, "section"))  # noqa: B009  # set by @section


def as_input_error(cls: type, error: ValidationError, keys: list[object]) -> InputError:
    """Pydantic's errors of section ``cls`` one line each: unknown keys first, then bad values
    in the order their keys were given; the missing keys once there is nothing else."""
    found: list[tuple[int, int, str]] = []
    missing = []
    for item in error.errors(include_url=False):
        loc = [str(part) for part in item["loc"]]
        where = ".".join([_name(cls), *loc])
        order = keys.index(item["loc"][0]) if item["loc"][0] in keys else len(keys)
        cause = item.get("ctx", {}).get("error")
        if item["type"] == "missing":
            missing.append(loc[-1])
        elif item["type"] in ("unexpected_keyword_argument", "extra_forbidden", "invalid_key"):
            owner = ".".join([_name(cls), *loc[:-1]])
            unknown = unknown_key(owner, item["loc"][-1], _keys(cls, loc[:-1]))
            found.append((0, order, str(unknown or f"{where}: unknown key")))
        elif isinstance(cause, FieldError):
            found += [(1, order, where + message) for message in cause.messages]
        else:  # pydantic's own check: its words
            found.append((1, order, f"{where}: got {shown(item['input'])}; {item['msg']}"))
    lines = [line for _, _, line in sorted(found, key=lambda f: f[:2])]
    if missing and not lines:  # as before: a section's missing keys once its given ones pass
        lines.append(f"{_name(cls)}: missing required key(s) {', '.join(missing)}")
    errors = [InputError(line) for line in lines]
    return errors[0] if len(errors) == 1 else InputErrors(errors)


def _keys(cls: type, path: list[str]) -> list[str]:
    """The keys of the section at ``path`` below ``cls`` (a nested one such as lr_search)."""
    for name in path:
        hint = typing.get_type_hints(cls)[name]
        nested = [a for a in typing.get_args(hint) if isinstance(a, type)]
        cls = next(a for a in nested if dataclasses.is_dataclass(a))
    return [f.name for f in dataclasses.fields(cls)]


# Keys that once meant something: named with what replaced them, never silently ignored.
REMOVED_KEYS = {
    "refine.noise_z": "every sign is now decided by one rule at refine.alpha (and a guess of "
    "the noise is refine.noise_prior); delete the key",
}
LISTED_KEYS = 5  # valid keys named after an unknown one (a section has up to 31)


def unknown_key(section: str | None, key: object, allowed: list[str]) -> InputError | None:
    """The error of ``key`` in ``section`` (None: the top level), removed or unknown with the
    closest valid key; None for a valid key."""
    where = str(key) if section is None else f"{section}.{key}"
    if where in REMOVED_KEYS:
        return InputError(f"{where}: no longer used: {REMOVED_KEYS[where]}")
    if key in allowed:
        return None
    close = difflib.get_close_matches(str(key), allowed, n=1)
    if close:
        return InputError(f"{where}: unknown key; did you mean {shown(close[0])}?")
    if len(allowed) <= LISTED_KEYS:
        return InputError(f"{where}: unknown key; valid keys: {', '.join(allowed)}")
    nearest = ", ".join(difflib.get_close_matches(str(key), allowed, n=3, cutoff=0.0))
    listed = f"{len(allowed)} in all, see docs/spec.schema.json"
    return InputError(f"{where}: unknown key; closest valid keys: {nearest} ({listed})")
