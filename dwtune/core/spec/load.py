"""Reading a study spec: YAML in ``search_spaces/`` parsed once into an
[ExperimentSpec][dwtune.core.spec.ExperimentSpec].

[load_spec][dwtune.core.spec.load_spec] is the only boundary where raw YAML is touched. Each
section validates and coerces itself (dwtune.core.spec.sections: pydantic dataclasses, every
problem of a section at once, an unknown key with the closest valid key); what stays here is
what no section can say alone: the spec file (size, syntax, nesting), its top-level keys, and
the checks across sections.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from dwtune.core.errors import ErrorCollector, InputError, shown
from dwtune.core.spec import limits
from dwtune.core.spec.checks import at_most, one_of, shape_problem
from dwtune.core.spec.experiment import ExperimentSpec
from dwtune.core.spec.fields import as_str, build, unknown_key
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
    TrackersConfig,
    TrainConfig,
)
from dwtune.core.vocabulary import FIT_MIN_PAIRS, Design, Trainer

SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "model": ModelConfig,
    "space": SpaceConfig,
    "train": TrainConfig,
    "refine": RefineConfig,
    "fit": FitConfig,
    "resources": ResourcesConfig,
    "trackers": TrackersConfig,
    "simulated": SimulatedConfig,
}
TOP_LEVEL = ["name", "description", "trainer", *SECTIONS]
# Dotted keys of the text fields: an override keeps their scalar values as written
TEXT_KEYS = frozenset(
    ["name", "description", "trainer"]
    + [
        f"{key}.{field}"
        for key, cls in SECTIONS.items()
        for field, info in cls.__pydantic_fields__.items()  # type: ignore[attr-defined]
        if info.annotation in (str, str | None)
    ]
)


def _train(raw: object) -> TrainConfig:
    """``train.lr`` is a number or a search mapping; a search becomes ``lr_search`` and ``lr``
    its geometric midpoint (never trained: every trial gets its own searched rate)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("lr"), dict):
        return build(TrainConfig, raw)
    errors = ErrorCollector()
    search = errors.attempt(build, LrSearchConfig, raw["lr"])
    train = errors.attempt(build, TrainConfig, {k: v for k, v in raw.items() if k != "lr"})
    errors.raise_any()
    assert search is not None and train is not None  # both built, or raise_any raised
    searched: TrainConfig = dataclasses.replace(train, lr=search.midpoint, lr_search=search)
    return searched


def _model(raw: object) -> ModelConfig:
    if isinstance(raw, dict) and "heads" in raw and raw.get("head_dim") is not None:
        raise InputError(
            f"model: got both heads ({shown(raw['heads'])}) and head_dim "
            f"({shown(raw['head_dim'])}); "
            f"give one: heads fixes the head count, head_dim the head width"
        )
    return build(ModelConfig, raw)


def spec_from_dict(raw: object, source: str = "", overrides: Iterable[str] = ()) -> ExperimentSpec:
    """Validate a raw mapping (parsed YAML) into an
    [ExperimentSpec][dwtune.core.spec.ExperimentSpec], with ``KEY=VALUE`` ``overrides`` set
    first. Every unknown key, bad value and range error of the sections is reported in one
    ``InputErrors``."""
    raw = apply_overrides(raw, overrides, TEXT_KEYS)
    if not isinstance(raw, dict):
        raise InputError(
            f"spec: got {type(raw).__name__}; expected a mapping with name, space, train"
        )
    problem = shape_problem(raw)
    if problem:
        raise InputError(f"spec: {problem}; not a dwtune spec")
    # Every unknown key, bad value and range error of every section in one pass; the checks
    # across sections need whole sections, so they run once these pass.
    errors = ErrorCollector()
    for error in filter(None, (unknown_key(None, key, TOP_LEVEL) for key in raw)):
        errors.add(error)
    for required in ("name", "space", "train"):
        if required not in raw:
            errors.add(InputError(f"{required}: missing; every spec needs name, space and train"))
    sections = _sections(raw, errors)
    name = errors.attempt(as_str, "name", raw.get("name", ""))
    if name is not None and "name" in raw:
        errors.attempt(_check_name, name)
    description = errors.attempt(as_str, "description", raw.get("description", ""))
    trainer = errors.attempt(as_str, "trainer", raw.get("trainer", "torch"))
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
    builders = {"train": _train, "model": _model}
    # each value is its key's section config, typed by ExperimentSpec's fields
    sections: dict[str, Any] = {}
    for key, cls in SECTIONS.items():
        if key in raw:
            build_one = builders.get(key, lambda value, cls=cls: build(cls, value))
            sections[key] = errors.attempt(build_one, raw[key])
    return {key: section for key, section in sections.items() if section is not None}


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
    validation (``dwtune.core.spec.overrides``)."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise InputError(
            f"{path}: is a directory; pass a spec file such as search_spaces/quickstart.yaml"
        )
    if not path.exists():
        raise InputError(f"{path}: no such spec file; see search_spaces/ for examples")
    raw = apply_overrides(parse_yaml_file(path), overrides, TEXT_KEYS)
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
        raw = yaml.safe_load(path.read_text())
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
    # judged before anything walks it: overrides copy it, messages print parts of it
    problem = shape_problem(raw)
    if problem:
        raise InputError(f"{path}: {problem}; not a dwtune spec")
    return raw


def _corpus_relative_to(spec: ExperimentSpec, folder: Path) -> ExperimentSpec:
    """A relative corpus path means relative to the spec file, wherever dwtune is run from."""
    corpus = spec.data.corpus
    if corpus in BUILTIN_CORPORA or Path(corpus).expanduser().is_absolute():
        return spec
    data = dataclasses.replace(spec.data, corpus=str((folder / corpus).resolve()))
    return dataclasses.replace(spec, data=data)
