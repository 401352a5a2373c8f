"""Experiment specs (pure): YAML in ``search_spaces/`` parsed once into frozen, typed configs.

Each concern has one small frozen dataclass; :func:`load_spec` is the only boundary where raw YAML
is touched. Unknown keys are errors (with the closest valid key suggested). PyYAML reads ``1e6``
and ``3e-3`` as strings: numeric fields accept such strings deliberately, and sizes also accept
suffixes (``50M``, ``175B``).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from dwtune.core.errors import ErrorCollector, InputError, shown
from dwtune.core.spec import limits
from dwtune.core.spec.checks import at_most, nesting_depth, one_of
from dwtune.core.spec.experiment import ExperimentSpec
from dwtune.core.spec.overrides import apply_overrides
from dwtune.core.spec.sections import (
    BUILTIN_CORPORA,
    TRAINERS,
    DataConfig,
    FitConfig,
    LrSearchConfig,
    ModelConfig,
    RefineConfig,
    ResourcesConfig,
    SimulatedConfig,
    SpaceConfig,
    TrainConfig,
)
from dwtune.core.units import parse_size
from dwtune.core.vocabulary import FIT_MIN_PAIRS, Design, Trainer

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_Config = TypeVar("_Config", bound="DataclassInstance")
# A listed key's converter: (field name for messages, raw YAML value) -> the field's value.
_Converter = Callable[[str, object], object]

# Keys that once meant something: named with what replaced them, never silently ignored.
REMOVED_KEYS = {
    "refine.noise_z": "every sign is now decided by one rule at refine.alpha (and a guess of "
    "the noise is refine.noise_prior); delete the key",
}


def _check_keys(section: str, raw: Mapping[object, object], allowed: list[str]) -> None:
    """Every unknown or removed key of ``raw``, reported together."""
    errors = ErrorCollector()
    for key in raw:
        errors.attempt(_check_key, section, key, allowed)
    errors.raise_any()


def _check_key(section: str, key: object, allowed: list[str]) -> None:
    removed = REMOVED_KEYS.get(f"{section}.{key}")
    if removed:
        raise InputError(f"{section}.{key}: no longer used: {removed}")
    if key not in allowed:
        where = f"{section}.{key}" if section else str(key)
        raise InputError(f"{where}: unknown key; {_key_hint(str(key), allowed)}")


LISTED_KEYS = 5  # valid keys named after an unknown one (a section has up to 27)


def _key_hint(key: str, allowed: list[str]) -> str:
    """The closest valid key, else the few nearest: a list of every key is too long a line."""
    close = difflib.get_close_matches(key, allowed, n=1)
    if close:
        return f"did you mean {shown(close[0])}?"
    if len(allowed) <= LISTED_KEYS:
        return f"valid keys: {', '.join(allowed)}"
    nearest = difflib.get_close_matches(key, allowed, n=3, cutoff=0.0)
    listed = f"{len(allowed)} in all, see docs/spec.schema.json"
    return f"closest valid keys: {', '.join(nearest)} ({listed})"


def _as_int(name: str, value: object) -> int:
    if isinstance(value, bool):
        raise InputError(f"{name}: got {shown(value)}; expected an integer")
    if isinstance(value, int):
        return value
    number = parse_size(value, name) if isinstance(value, str) else value
    if isinstance(number, float) and number.is_integer():
        return int(number)
    raise InputError(f"{name}: got {shown(value)}; expected an integer")


def _as_float(name: str, value: object) -> float:
    if isinstance(value, bool):
        raise InputError(f"{name}: got {shown(value)}; expected a number")
    try:
        # "3e-3": PyYAML leaves exponents without a dot as text
        number = float(value) if isinstance(value, int | float) else float(str(value))
    except (ValueError, OverflowError):
        raise InputError(f"{name}: got {shown(value)}; expected a number such as 3e-3") from None
    if not math.isfinite(number):  # .nan, .inf, "inf": refused everywhere
        raise InputError(f"{name}: got {shown(value)}; expected a finite number")
    return number


def _as_bool(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    raise InputError(f"{name}: got {shown(value)}; expected true or false")


def _as_str(name: str, value: object) -> str:
    if isinstance(value, bool):  # YAML `compile: true` for a string field
        return str(value).lower()
    if isinstance(value, str | int | float):
        return str(value)
    raise InputError(f"{name}: got {shown(value)}; expected a string")


def _convert(name: str, hint: object, value: object) -> object:
    """Coerce one raw YAML value to the dataclass field type ``hint``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if value is None:
            return None
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    converters = {int: _as_int, float: _as_float, bool: _as_bool, str: _as_str}
    if hint in converters:
        if value is None:
            raise InputError(f"{name}: got null; expected a value")
        return converters[hint](name, value)
    raise TypeError(f"no converter for {hint}")  # programming error, not user input


def _build(
    cls: type[_Config],
    section: str,
    raw: object,
    special: Mapping[str, _Converter] | None = None,
) -> _Config:
    """Build a section's dataclass from its raw mapping; ``special`` converts listed keys."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InputError(f"{section}: got {shown(raw)}; expected a mapping of keys to values")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    errors = ErrorCollector()  # unknown keys and bad values of the section, all at once
    errors.attempt(_check_keys, section, raw, list(fields))
    hints = typing.get_type_hints(cls)
    special = special or {}
    kwargs: dict[str, object] = {}
    for key, value in raw.items():
        name = f"{section}.{key}"
        if key not in fields:
            continue
        try:
            kwargs[key] = (
                special[key](name, value) if key in special else _convert(name, hints[key], value)
            )
        except InputError as error:
            errors.add(error)
    errors.raise_any()
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required key is missing
        missing = [
            f
            for f, spec in fields.items()
            if f not in kwargs
            and spec.default is dataclasses.MISSING
            and spec.default_factory is dataclasses.MISSING
        ]
        raise InputError(f"{section}: missing required key(s) {', '.join(missing)}") from exc


def _list_of(name: str, value: object) -> list[object]:
    if not isinstance(value, list):
        raise InputError(f"{name}: got {shown(value)}; expected a list")
    return value


def _depths(name: str, value: object) -> tuple[int, ...]:
    return tuple(_as_int(name, v) for v in _list_of(name, value))


def _budgets(name: str, value: object) -> tuple[float, ...]:
    """A list of sizes, or ``{min, max, num}`` log-spaced inclusive."""
    if isinstance(value, dict):
        _check_keys(name, value, ["min", "max", "num"])
        if set(value) != {"min", "max", "num"}:
            raise InputError(f"{name}: got {shown(value)}; expected keys min, max and num")
        low, high = parse_size(value["min"], f"{name}.min"), parse_size(value["max"], f"{name}.max")
        num = _as_int(f"{name}.num", value["num"])
        at_most(f"{name}.num", num, limits.MAX_BUDGETS)  # before the list is made
        at_most(f"{name}.max", high, limits.MAX_BUDGET)
        if num < 1 or high < low or (num == 1 and high != low):
            raise InputError(f"{name}: got {shown(value)}; expected min <= max and num >= 1")
        ratio = (high / low) ** (1 / (num - 1)) if num > 1 else 1.0
        return tuple(float(f"{low * ratio**i:.6g}") for i in range(num))
    return tuple(sorted({parse_size(v, name) for v in _list_of(name, value)}))


def _seeds(name: str, value: object) -> tuple[int, ...]:
    if isinstance(value, list):
        return tuple(_as_int(name, v) for v in value)
    count = _as_int(name, value)
    at_most(f"{name} (count)", count, limits.MAX_SEEDS)  # before the range is made
    if count < 1:
        raise InputError(f"{name}: got {shown(value)}; expected a count >= 1 or a list of seeds")
    return tuple(range(count))


def _pairs(name: str, value: object) -> tuple[tuple[int, ...], ...]:
    pairs = []
    for pair in _list_of(name, value):
        if not isinstance(pair, list):
            raise InputError(f"{name}: got {shown(pair)}; expected [shallower, deeper] pairs")
        pairs.append(tuple(_as_int(name, v) for v in pair))
    return tuple(pairs)


def _sizes(name: str, value: object) -> tuple[float, ...]:
    return tuple(parse_size(v, name) for v in _list_of(name, value))


def _factors(name: str, value: object) -> tuple[float, ...]:
    return tuple(_as_float(name, v) for v in _list_of(name, value))


def _lr_search(name: str, value: object) -> LrSearchConfig | None:
    if value is None:  # the resolved spec.yaml of a spec without a search
        return None
    if not isinstance(value, dict):
        raise InputError(
            f"{name}: got {shown(value)}; expected a search such as "
            f"{{search: log, min: 1e-4, max: 3e-2, trials: 8, fidelity: 0.25}}"
        )
    return _build(LrSearchConfig, name, value)


def _train(raw: object) -> TrainConfig:
    """``train.lr`` is a number or a search mapping; a search becomes ``lr_search`` and ``lr``
    its geometric midpoint (never trained: every trial gets its own searched rate)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("lr"), dict):
        return _build(TrainConfig, "train", raw, {"lr_search": _lr_search})
    raw = dict(raw)
    search = _lr_search("train.lr", raw.pop("lr"))
    assert search is not None  # a mapping (checked above) is a search
    train = _build(TrainConfig, "train", raw)
    return dataclasses.replace(train, lr=search.midpoint, lr_search=search)


def _model(raw: object) -> ModelConfig:
    if isinstance(raw, dict) and "heads" in raw and raw.get("head_dim") is not None:
        raise InputError(
            f"model: got both heads ({shown(raw['heads'])}) and head_dim "
            f"({shown(raw['head_dim'])}); "
            f"give one: heads fixes the head count, head_dim the head width"
        )
    return _build(ModelConfig, "model", raw)


SECTIONS: dict[str, tuple[type[DataclassInstance], dict[str, _Converter]]] = {
    "data": (DataConfig, {}),
    "model": (ModelConfig, {}),
    "space": (SpaceConfig, {"depths": _depths, "budgets": _budgets, "seeds": _seeds}),
    "train": (TrainConfig, {}),
    "refine": (RefineConfig, {"pairs": _pairs, "length_check": _factors}),
    "fit": (FitConfig, {"budgets": _sizes}),
    "resources": (ResourcesConfig, {}),
    "simulated": (SimulatedConfig, {}),
}
TOP_LEVEL = ["name", "description", "trainer", *SECTIONS]


def spec_from_dict(raw: object, source: str = "", overrides: Iterable[str] = ()) -> ExperimentSpec:
    """Validate a raw mapping (parsed YAML) into an :class:`ExperimentSpec`, with ``KEY=VALUE``
    ``overrides`` set first. Every unknown key, bad value and range error of the sections is
    reported in one :class:`~dwtune.core.errors.InputErrors`."""
    raw = apply_overrides(raw, overrides)
    if not isinstance(raw, dict):
        raise InputError(
            f"spec: got {type(raw).__name__}; expected a mapping with name, space, train"
        )
    if nesting_depth(raw, limits.MAX_NESTING) > limits.MAX_NESTING:
        raise InputError(f"spec: nested deeper than {limits.MAX_NESTING} levels; not a dwtune spec")
    # Every unknown key, bad value and range error of every section in one pass; the checks
    # across sections need whole sections, so they run once these pass.
    errors = ErrorCollector()
    errors.attempt(_check_keys, "", raw, TOP_LEVEL)
    for required in ("name", "space", "train"):
        if required not in raw:
            errors.add(InputError(f"{required}: missing; every spec needs name, space and train"))
    sections = _sections(raw, errors)
    name = errors.attempt(_as_str, "name", raw.get("name", ""))
    if name is not None and "name" in raw:
        errors.attempt(_check_name, name)
    description = errors.attempt(_as_str, "description", raw.get("description", ""))
    trainer = errors.attempt(_as_str, "trainer", raw.get("trainer", "torch"))
    if trainer is not None:
        errors.attempt(one_of, "trainer", trainer, TRAINERS)
    errors.raise_any()
    spec = ExperimentSpec(
        name=str(name),
        description=str(description),
        trainer=str(trainer),
        source=source,
        **sections,
    )
    return _cross_check(spec)


def _sections(raw: dict[object, object], errors: ErrorCollector) -> dict[str, Any]:
    """Each section present in ``raw`` built into its config; a failed one adds its errors."""
    builders: dict[str, Callable[[object], object]] = {"train": _train, "model": _model}
    # each value is its key's section config, typed by ExperimentSpec's fields
    sections: dict[str, Any] = {}
    for key, (cls, special) in SECTIONS.items():
        if key not in raw:
            continue
        try:
            sections[key] = (
                builders[key](raw[key]) if key in builders else _build(cls, key, raw[key], special)
            )
        except InputError as error:
            errors.add(error)
    return sections


def _check_waves(spec: ExperimentSpec) -> None:
    """refine.waves (law design; the grid design ignores it): a first wave the law can be
    fitted on."""
    waves, pairs = spec.refine.waves, len(spec.refine.pairs)
    if waves == 1 or spec.refine.design != Design.LAW:
        return
    most = max(1, (pairs - 1) // (FIT_MIN_PAIRS - 1))  # ceil(pairs / waves) >= FIT_MIN_PAIRS
    if waves > most:
        raise InputError(
            f"refine.waves: got {waves} for {pairs} refine pair(s); the first wave must hold "
            f"{FIT_MIN_PAIRS} pairs, the fewest a law is fitted on: expected refine.waves: "
            f"{most} or fewer"
        )


def _cross_check(spec: ExperimentSpec) -> ExperimentSpec:
    """Checks that involve more than one section."""
    for pair in spec.refine.pairs:
        for depth in pair:
            if depth not in spec.space.depths:
                raise InputError(
                    f"refine.pairs: depth {depth} in {list(pair)} is not in space.depths "
                    f"{list(spec.space.depths)}; add it there or change the pair"
                )
    if spec.refine.design == Design.LAW and not spec.refine.pairs:
        raise InputError(
            "refine.design: got 'law' without refine.pairs; list the depth pairs whose N* the "
            "law places, or use design: grid"
        )
    _check_waves(spec)
    _check_distinct_pairs(spec)
    _check_length_factors(spec)
    _check_sharding(spec)
    spec.grid()  # raises for a budget too small for a depth
    for budget in spec.fit.budgets:  # the grid's rule: at least one layer at the least width
        try:
            spec.cell(1, budget)
        except InputError:
            raise InputError(
                f"fit.budgets: got {budget:g}; smaller than one layer of this model; "
                f"expected sizes such as 1.75e11"
            ) from None
    return spec


def _check_sharding(spec: ExperimentSpec) -> None:
    """A sharded trial splits every global batch evenly over its workers, and only the torch
    trainer shards."""
    workers = spec.resources.workers_per_trial
    if workers == 1:
        return
    if spec.trainer != "torch":
        raise InputError(
            f"resources.workers_per_trial: got {workers}; only the torch trainer shards a "
            f"trial (trainer is {spec.trainer}); use 1"
        )
    if spec.train.batch_size % workers:
        raise InputError(
            f"train.batch_size: got {spec.train.batch_size}; a trial sharded over "
            f"resources.workers_per_trial = {workers} workers needs a batch size divisible "
            f"by {workers}"
        )


MAX_NAME_CHARS = 100  # the experiment folder's name; file systems allow 255 bytes


def _check_name(name: str) -> None:
    """A name that names a folder plainly: a leading '-' reads as a flag to every shell tool
    (``dwtune report --help`` would print help, ``rm -r --help`` would not remove it)."""
    plain = name.replace("-", "").replace("_", "").isalnum() and name[:1].isalnum()
    if not plain or len(name) > MAX_NAME_CHARS:
        raise InputError(
            f"name: got {shown(name)}; expected letters, digits, '-' and '_', starting with a "
            f"letter or digit, at most {MAX_NAME_CHARS} characters (it names the experiment folder)"
        )


def _check_length_factors(spec: ExperimentSpec) -> None:
    """A refine.length_check factor must change the training length once rounded to whole
    steps or tokens (records.scaled_length), or the check would retrain the same trials."""
    train = spec.train
    length = train.steps if train.steps is not None else train.tokens
    if length is None:  # tokens_per_param: any factor but 1 changes it
        return
    for factor in spec.refine.length_check:
        scaled = max(1, round(length * factor))
        if scaled == length:
            raise InputError(
                f"refine.length_check: got {factor:g}; {factor:g} × {length} rounds to the "
                f"same training length; use a factor further from 1"
            )
        at_most(f"refine.length_check ({factor:g} × train length)", scaled, _length_limit(train))


def _length_limit(train: TrainConfig) -> float:
    return limits.MAX_STEPS if train.steps is not None else limits.MAX_TOKENS


def _check_distinct_pairs(spec: ExperimentSpec) -> None:
    """No pair twice; on the simulated surface a depth is the deeper one of one pair at most."""
    pairs = [list(pair) for pair in spec.refine.pairs]
    for i, pair in enumerate(pairs):
        if pair in pairs[:i]:
            raise InputError(f"refine.pairs: {pair} is listed twice; list each pair once")
    if spec.trainer != Trainer.SIMULATED:
        return
    deeper = [pair[1] for pair in pairs]
    for depth in deeper:
        if deeper.count(depth) > 1:
            raise InputError(
                f"refine.pairs: depth {depth} is the deeper depth of "
                f"{[p for p in pairs if p[1] == depth]}; the simulated surface plants one "
                f"transition per deeper depth, so keep one of those pairs"
            )


def load_spec(path: str | Path, overrides: Iterable[str] = ()) -> ExperimentSpec:
    """Read and validate a spec file; every failure is an InputError naming the fix.

    ``overrides``: ``KEY=VALUE`` strings (``train.steps=100``) set in the raw mapping before
    validation (:mod:`dwtune.core.spec.overrides`)."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise InputError(
            f"{path}: is a directory; pass a spec file such as search_spaces/quickstart.yaml"
        )
    if not path.exists():
        raise InputError(f"{path}: no such spec file; see search_spaces/ for examples")
    raw = apply_overrides(parse_yaml_file(path), overrides)
    spec = spec_from_dict(raw, source=str(path.resolve()))
    return _corpus_relative_to(spec, path.resolve().parent)


def parse_yaml_file(path: Path) -> object:
    """A YAML file's content; a file that is not YAML text of bounded size and nesting is one
    InputError naming it."""
    if not path.is_file():
        raise InputError(f"{path}: not a regular file; pass a YAML spec file")
    size = path.stat().st_size
    if size > limits.MAX_SPEC_BYTES:
        raise InputError(
            f"{path}: {size} bytes; a spec is at most {limits.MAX_SPEC_BYTES} bytes (see limits)"
        )
    try:
        return yaml.safe_load(path.read_text())
    except RecursionError:
        raise InputError(
            f"{path}: nested deeper than {limits.MAX_NESTING} levels; not a dwtune spec"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{path}: YAML syntax error{where}: {problem}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file; pass a YAML spec") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror})") from None


def _corpus_relative_to(spec: ExperimentSpec, folder: Path) -> ExperimentSpec:
    """A relative corpus path means relative to the spec file, wherever dwtune is run from."""
    corpus = spec.data.corpus
    if corpus in BUILTIN_CORPORA or Path(corpus).expanduser().is_absolute():
        return spec
    data = dataclasses.replace(spec.data, corpus=str((folder / corpus).resolve()))
    return dataclasses.replace(spec, data=data)
