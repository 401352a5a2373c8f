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
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from dwtune.budget import SIZE_CONVENTIONS, GridCell, ModelShape, solve_width
from dwtune.errors import InputError
from dwtune.units import parse_size

TOKENIZERS = ("char", "bpe")
SCHEDULES = ("cosine", "linear", "constant")
TRAINERS = ("torch", "simulated")
BUILTIN_CORPORA = ("shakespeare",)
REFERENCE_FITS = ("levine2020",)  # dwtune.projection holds their constants


@dataclass(frozen=True)
class DataConfig:
    corpus: str = "shakespeare"  # built-in name, a .txt file, a folder of .txt, or a .parquet
    text_column: str = "text"  # for Parquet corpora
    tokenizer: str = "char"
    # Embedding rows. For `char` an upper bound on distinct characters (rows past them stay
    # unused), so that plans know the exact parameter count without reading the corpus.
    vocab_size: int = 128
    seq_len: int = 128
    val_fraction: float = 0.1
    cache_dir: str = "~/.cache/dwtune"

    def __post_init__(self) -> None:
        _one_of("data.tokenizer", self.tokenizer, TOKENIZERS)
        _at_least("data.vocab_size", self.vocab_size, 2)
        _at_least("data.seq_len", self.seq_len, 2)
        if not 0 < self.val_fraction < 0.5:
            raise InputError(f"data.val_fraction: got {self.val_fraction}; expected 0 < x < 0.5")


@dataclass(frozen=True)
class ModelConfig:
    heads: int = 2  # per layer, at every width (the paper's setting)
    mlp_ratio: float = 4.0
    width_multiple: int = 8  # widths are multiples of lcm(heads, width_multiple)
    tied_embeddings: bool = True
    bias: bool = False
    size_convention: str = "non_embedding"  # 12·L·dx² as in the paper, or "total" exact count

    def __post_init__(self) -> None:
        _at_least("model.heads", self.heads, 1)
        _at_least("model.width_multiple", self.width_multiple, 1)
        _positive("model.mlp_ratio", self.mlp_ratio)
        _one_of("model.size_convention", self.size_convention, SIZE_CONVENTIONS)


@dataclass(frozen=True)
class SpaceConfig:
    depths: tuple[int, ...]
    budgets: tuple[float, ...]  # a list, or {min, max, num} log-spaced
    seeds: tuple[int, ...] = (0,)  # a list of seeds, or a count n meaning 0..n-1

    def __post_init__(self) -> None:
        if not self.depths:
            raise InputError("space.depths: got an empty list; expected depths such as [1, 2, 4]")
        for depth in self.depths:
            _at_least("space.depths", depth, 1)
        if len(set(self.depths)) != len(self.depths):
            raise InputError(f"space.depths: got {list(self.depths)}; expected distinct depths")
        if not self.budgets:
            raise InputError("space.budgets: got an empty list; expected sizes such as [1e5, 1e6]")
        if not self.seeds:
            raise InputError("space.seeds: got nothing; expected a count >= 1 or a list of seeds")
        if len(set(self.seeds)) != len(self.seeds):
            raise InputError(f"space.seeds: got {list(self.seeds)}; expected distinct seeds")


@dataclass(frozen=True)
class TrainConfig:
    steps: int | None = None  # give steps or tokens (tokens / (batch_size·seq_len) steps)
    tokens: int | None = None
    batch_size: int = 16
    lr: float = 3e-3
    warmup_steps: int = 100
    schedule: str = "cosine"  # linear warm-up, then cosine decay to min_lr_ratio·lr
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    eval_every: int = 100  # steps between validation passes
    eval_batches: int = 20  # fixed held-out batches per validation pass
    patience: int | None = None  # steps without val improvement before stopping; None = off
    compile: str = "auto"  # auto = on for CUDA, off for CPU
    device: str = "auto"  # auto | cpu | cuda

    def __post_init__(self) -> None:
        if (self.steps is None) == (self.tokens is None):
            raise InputError("train: got both or neither of steps and tokens; give exactly one")
        _at_least(
            "train.steps" if self.steps is not None else "train.tokens",
            self.steps if self.steps is not None else self.tokens,
            1,
        )
        for name in ("batch_size", "eval_every", "eval_batches"):
            _at_least(f"train.{name}", getattr(self, name), 1)
        _at_least("train.warmup_steps", self.warmup_steps, 0)
        _positive("train.lr", self.lr)
        for name in ("beta1", "beta2", "min_lr_ratio"):
            _within(f"train.{name}", getattr(self, name), 0.0, 1.0)
        _at_least("train.weight_decay", self.weight_decay, 0)
        _at_least("train.grad_clip", self.grad_clip, 0)
        _one_of("train.schedule", self.schedule, SCHEDULES)
        _one_of("train.compile", self.compile, ("auto", "true", "false"))
        _one_of("train.device", self.device, ("auto", "cpu", "cuda"))
        if self.patience is not None:
            _at_least("train.patience", self.patience, 1)

    def lr_at(self, step: int, total_steps: int) -> float:
        """Learning rate of the update made at 0-based ``step``: linear warm-up, then decay
        (cosine or linear to min_lr_ratio·lr, or constant). One formula for every backend."""
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        if self.schedule == "constant":
            return self.lr
        floor = self.min_lr_ratio * self.lr
        span = max(1, total_steps - self.warmup_steps)
        progress = min((step - self.warmup_steps) / span, 1.0)  # [0, 1]
        if self.schedule == "linear":
            return floor + (self.lr - floor) * (1.0 - progress)
        return floor + (self.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    def total_steps(self, seq_len: int) -> int:
        if self.steps is not None:
            return self.steps
        return max(1, self.tokens // (self.batch_size * seq_len))


@dataclass(frozen=True)
class RefineConfig:
    pairs: tuple[tuple[int, int], ...] = ()  # (shallower, deeper) depth pairs
    tolerance: float = 0.1  # stop once N_high / N_low - 1 <= tolerance
    seeds: int = 1  # paired seeds trained at each proposed size
    max_seeds: int = 3  # seeds added while |Δ| is within noise
    max_rounds: int = 8  # bisection rounds per pair
    noise_z: float = 2.0  # |mean Δ| must exceed noise_z standard errors to decide its sign

    def __post_init__(self) -> None:
        _positive("refine.tolerance", self.tolerance)
        _at_least("refine.seeds", self.seeds, 1)
        _at_least("refine.max_seeds", self.max_seeds, self.seeds)
        _at_least("refine.max_rounds", self.max_rounds, 0)
        _positive("refine.noise_z", self.noise_z)
        for pair in self.pairs:
            if len(pair) != 2 or pair[0] >= pair[1]:
                raise InputError(
                    f"refine.pairs: got {list(pair)}; expected [shallower, deeper] depths"
                )


@dataclass(frozen=True)
class FitConfig:
    budgets: tuple[float, ...] = (1.75e11, 1e12, 1e13)  # sizes to project the best shape for
    reference: str = "levine2020"  # published fit drawn beside the study's

    def __post_init__(self) -> None:
        _one_of("fit.reference", self.reference, REFERENCE_FITS)


@dataclass(frozen=True)
class ResourcesConfig:
    cpu: float = 1.0  # per trial
    gpu: float = 0.0  # per trial; fractions must divide 1 (0.5, 0.25, ...)
    max_concurrent: int | None = None  # None: as many as resources allow
    retries: int = 1  # re-runs of a failed trial before it is recorded as failed

    def __post_init__(self) -> None:
        _positive("resources.cpu", self.cpu)
        _at_least("resources.gpu", self.gpu, 0)
        if 0 < self.gpu < 1 and not math.isclose(1 / self.gpu, round(1 / self.gpu)):
            raise InputError(
                f"resources.gpu: got {self.gpu}; fractions must divide 1 (0.5, 0.25, 0.125)"
            )
        if self.gpu > 1 and self.gpu != int(self.gpu):
            raise InputError(f"resources.gpu: got {self.gpu}; above 1 use whole GPUs")
        if self.max_concurrent is not None:
            _at_least("resources.max_concurrent", self.max_concurrent, 1)
        _at_least("resources.retries", self.retries, 0)


@dataclass(frozen=True)
class SimulatedConfig:
    """Planted law and noise of the simulated backend (see dwtune.simulate)."""

    a: float = 5.039  # planted ln dx* = a + b·L
    b: float = 0.0555
    noise: float = 0.002  # seed-to-seed standard deviation of the final loss (nats)
    seconds_per_step: float = 0.0  # optional sleep per reported step, to rehearse scheduling
    gap: float = 0.05  # largest loss gap (nats) one planted depth pair opens far from its N*
    transition_scale: float = 0.5  # e-folds of N over which a pair's gap changes sign
    seed_correlation: float = 0.5  # share of the noise variance a seed gives every depth

    def __post_init__(self) -> None:
        _at_least("simulated.noise", self.noise, 0)
        _at_least("simulated.seconds_per_step", self.seconds_per_step, 0)
        _at_least("simulated.gap", self.gap, 0)
        _positive("simulated.transition_scale", self.transition_scale)
        if not 0 <= self.seed_correlation <= 1:
            raise InputError(
                f"simulated.seed_correlation: got {self.seed_correlation!r}; expected 0 <= x <= 1"
            )


@dataclass(frozen=True)
class ExperimentSpec:
    name: str
    space: SpaceConfig
    train: TrainConfig
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    refine: RefineConfig = field(default_factory=RefineConfig)
    fit: FitConfig = field(default_factory=FitConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    trainer: str = "torch"
    simulated: SimulatedConfig = field(default_factory=SimulatedConfig)
    description: str = ""
    source: str = ""  # the file it came from (absolute); not part of any identity

    def shape_template(self) -> ModelShape:
        return ModelShape(
            depth=1,
            width=self.model.heads,
            heads=self.model.heads,
            vocab_size=self.data.vocab_size,
            seq_len=self.data.seq_len,
            mlp_ratio=self.model.mlp_ratio,
            tied_embeddings=self.model.tied_embeddings,
            bias=self.model.bias,
        )

    def cell(self, depth: int, budget: float) -> GridCell:
        """The grid cell (shape at the budget-solving width) for one depth and budget."""
        return solve_width(
            self.shape_template(),
            depth,
            budget,
            self.model.width_multiple,
            self.model.size_convention,
        )

    def grid(self) -> list[GridCell]:
        return [self.cell(d, n) for d in sorted(self.space.depths) for n in self.space.budgets]

    def to_dict(self) -> dict:
        """Plain, YAML-safe resolved spec (every default filled in)."""
        raw = dataclasses.asdict(self)
        raw.pop("source")
        return _lists(raw)


# --------------------------------------------------------------------------- validation helpers


def _at_least(name: str, value: float, minimum: float) -> None:
    if not math.isfinite(value) or value < minimum:
        raise InputError(f"{name}: got {value!r}; expected a value >= {minimum}")


def _within(name: str, value: float, low: float, high: float) -> None:
    if not (math.isfinite(value) and low <= value <= high):
        raise InputError(f"{name}: got {value!r}; expected {low} <= x <= {high}")


def _positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"{name}: got {value!r}; expected a positive finite number")


def _one_of(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InputError(f"{name}: got {value!r}; expected one of {', '.join(choices)}")


def _lists(value: object) -> object:
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_lists(v) for v in value]
    return value


# --------------------------------------------------------------------------- raw YAML -> configs


def _check_keys(section: str, raw: dict, allowed: list[str]) -> None:
    for key in raw:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(allowed)}"
            where = f"{section}.{key}" if section else str(key)
            raise InputError(f"{where}: unknown key; {hint}")


def _as_int(name: str, value: object) -> int:
    if isinstance(value, bool):
        raise InputError(f"{name}: got {value!r}; expected an integer")
    if isinstance(value, int):
        return value
    number = parse_size(value, name) if isinstance(value, str) else value
    if isinstance(number, float) and number.is_integer():
        return int(number)
    raise InputError(f"{name}: got {value!r}; expected an integer")


def _as_float(name: str, value: object) -> float:
    if isinstance(value, bool):
        raise InputError(f"{name}: got {value!r}; expected a number")
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value))  # "3e-3": PyYAML leaves exponents without a dot as text
    except ValueError:
        raise InputError(f"{name}: got {value!r}; expected a number such as 3e-3") from None


def _as_bool(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    raise InputError(f"{name}: got {value!r}; expected true or false")


def _as_str(name: str, value: object) -> str:
    if isinstance(value, bool):  # YAML `compile: true` for a string field
        return str(value).lower()
    if isinstance(value, str | int | float):
        return str(value)
    raise InputError(f"{name}: got {value!r}; expected a string")


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


def _build(cls: type, section: str, raw: object, special: dict | None = None) -> object:
    """Build a section's dataclass from its raw mapping; ``special`` converts listed keys."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InputError(f"{section}: got {raw!r}; expected a mapping of keys to values")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    _check_keys(section, raw, list(fields))
    hints = typing.get_type_hints(cls)
    special = special or {}
    kwargs = {}
    for key, value in raw.items():
        name = f"{section}.{key}"
        kwargs[key] = (
            special[key](name, value) if key in special else _convert(name, hints[key], value)
        )
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


def _list_of(name: str, value: object) -> list:
    if not isinstance(value, list):
        raise InputError(f"{name}: got {value!r}; expected a list")
    return value


def _depths(name: str, value: object) -> tuple[int, ...]:
    return tuple(_as_int(name, v) for v in _list_of(name, value))


def _budgets(name: str, value: object) -> tuple[float, ...]:
    """A list of sizes, or ``{min, max, num}`` log-spaced inclusive."""
    if isinstance(value, dict):
        _check_keys(name, value, ["min", "max", "num"])
        if set(value) != {"min", "max", "num"}:
            raise InputError(f"{name}: got {value!r}; expected keys min, max and num")
        low, high = parse_size(value["min"], f"{name}.min"), parse_size(value["max"], f"{name}.max")
        num = _as_int(f"{name}.num", value["num"])
        if num < 1 or high < low or (num == 1 and high != low):
            raise InputError(f"{name}: got {value!r}; expected min <= max and num >= 1")
        ratio = (high / low) ** (1 / (num - 1)) if num > 1 else 1.0
        return tuple(float(f"{low * ratio**i:.6g}") for i in range(num))
    return tuple(sorted({parse_size(v, name) for v in _list_of(name, value)}))


def _seeds(name: str, value: object) -> tuple[int, ...]:
    if isinstance(value, list):
        return tuple(_as_int(name, v) for v in value)
    count = _as_int(name, value)
    if count < 1:
        raise InputError(f"{name}: got {value!r}; expected a count >= 1 or a list of seeds")
    return tuple(range(count))


def _pairs(name: str, value: object) -> tuple[tuple[int, ...], ...]:
    pairs = []
    for pair in _list_of(name, value):
        if not isinstance(pair, list):
            raise InputError(f"{name}: got {pair!r}; expected [shallower, deeper] pairs")
        pairs.append(tuple(_as_int(name, v) for v in pair))
    return tuple(pairs)


def _sizes(name: str, value: object) -> tuple[float, ...]:
    return tuple(parse_size(v, name) for v in _list_of(name, value))


SECTIONS = {
    "data": (DataConfig, {}),
    "model": (ModelConfig, {}),
    "space": (SpaceConfig, {"depths": _depths, "budgets": _budgets, "seeds": _seeds}),
    "train": (TrainConfig, {}),
    "refine": (RefineConfig, {"pairs": _pairs}),
    "fit": (FitConfig, {"budgets": _sizes}),
    "resources": (ResourcesConfig, {}),
    "simulated": (SimulatedConfig, {}),
}
TOP_LEVEL = ["name", "description", "trainer", *SECTIONS]


def spec_from_dict(raw: object, source: str = "") -> ExperimentSpec:
    """Validate a raw mapping (parsed YAML) into an :class:`ExperimentSpec`."""
    if not isinstance(raw, dict):
        raise InputError(
            f"spec: got {type(raw).__name__}; expected a mapping with name, space, train"
        )
    _check_keys("", raw, TOP_LEVEL)
    for required in ("name", "space", "train"):
        if required not in raw:
            raise InputError(f"{required}: missing; every spec needs name, space and train")
    sections = {
        key: _build(cls, key, raw.get(key), special)
        for key, (cls, special) in SECTIONS.items()
        if key in raw
    }
    spec = ExperimentSpec(
        name=_as_str("name", raw["name"]),
        description=_as_str("description", raw.get("description", "")),
        trainer=_as_str("trainer", raw.get("trainer", "torch")),
        source=source,
        **sections,
    )
    return _cross_check(spec)


def _cross_check(spec: ExperimentSpec) -> ExperimentSpec:
    """Checks that involve more than one section."""
    _one_of("trainer", spec.trainer, TRAINERS)
    if not spec.name.replace("-", "").replace("_", "").isalnum():
        raise InputError(f"name: got {spec.name!r}; expected letters, digits, '-' and '_' only")
    for pair in spec.refine.pairs:
        for depth in pair:
            if depth not in spec.space.depths:
                raise InputError(
                    f"refine.pairs: depth {depth} in {list(pair)} is not in space.depths "
                    f"{list(spec.space.depths)}; add it there or change the pair"
                )
    _check_distinct_pairs(spec)
    spec.grid()  # raises for a budget too small for a depth
    return spec


def _check_distinct_pairs(spec: ExperimentSpec) -> None:
    """No pair twice; on the simulated surface a depth is the deeper one of one pair at most."""
    pairs = [list(pair) for pair in spec.refine.pairs]
    for i, pair in enumerate(pairs):
        if pair in pairs[:i]:
            raise InputError(f"refine.pairs: {pair} is listed twice; list each pair once")
    if spec.trainer != "simulated":
        return
    deeper = [pair[1] for pair in pairs]
    for depth in deeper:
        if deeper.count(depth) > 1:
            raise InputError(
                f"refine.pairs: depth {depth} is the deeper depth of "
                f"{[p for p in pairs if p[1] == depth]}; the simulated surface plants one "
                f"transition per deeper depth, so keep one of those pairs"
            )


def load_spec(path: str | Path) -> ExperimentSpec:
    """Read and validate a spec file; every failure is an InputError naming the fix."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise InputError(
            f"{path}: is a directory; pass a spec file such as search_spaces/quickstart.yaml"
        )
    if not path.exists():
        raise InputError(f"{path}: no such spec file; see search_spaces/ for examples")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{path}: YAML syntax error{where}: {problem}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file; pass a YAML spec") from None
    spec = spec_from_dict(raw, source=str(path.resolve()))
    return _corpus_relative_to(spec, path.resolve().parent)


def _corpus_relative_to(spec: ExperimentSpec, folder: Path) -> ExperimentSpec:
    """A relative corpus path means relative to the spec file, wherever dwtune is run from."""
    corpus = spec.data.corpus
    if corpus in BUILTIN_CORPORA or Path(corpus).expanduser().is_absolute():
        return spec
    data = dataclasses.replace(spec.data, corpus=str((folder / corpus).resolve()))
    return dataclasses.replace(spec, data=data)
