"""Trial requests, trial records and their content identity (pure).

A trial's identity is a hash of everything that determines its result: the model shape, the
training config, the data and tokenizer config, the seed and the trainer backend (with the
simulated surface's parameters and the depth's planted pairs when simulated). Stage, budget and
resources are not part of it: the same model trained for the grid and for the refine stage is
one trial, trained once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dwtune.core import vocabulary
from dwtune.core.budget import GridCell, ModelShape
from dwtune.core.spec import DataConfig, ExperimentSpec, TrainConfig
from dwtune.core.vocabulary import Parametrization, PointKind, Stage, Trainer

SPEC_RATE: tuple[float | None, str] = (None, vocabulary.LR_SOURCE_SPEC)  # train.lr, unsearched
IDENTITY_VERSION = 1  # bump when the trainer changes what a given identity produces
# Layout of a trial record's JSON (trials/<id>.json): bump when a field changes meaning or is
# removed, and teach storage.loaders.migrate_record to read the older version.
RECORD_SCHEMA_VERSION = 1


def trial_identity(
    spec: ExperimentSpec,
    shape: ModelShape,
    seed: int,
    *,
    lr: float | None = None,
    search_steps: int | None = None,
    length_factor: float | None = None,
) -> str:
    """Stable 16-hex-digit content hash of a trial.

    ``lr`` is the trial's own rate (a searched one; None: ``train.lr``), which replaces the
    search in the training config. ``search_steps`` marks an ``lr_search`` trial trained for
    that many steps (ASHA may stop it early, so it is never the same trial as a full one).
    ``length_factor`` scales the training length (:func:`scaled_length`): the scaled config
    is what enters the identity, so the trial is that training whichever stage asked for it.
    The parametrisation enters only when it is not sp, so older identities are unchanged.
    """
    train = _trial_train(spec.train, lr, search_steps, length_factor)
    payload = {
        "v": IDENTITY_VERSION,
        "shape": dataclasses.asdict(shape),
        "train": train.identity(),
        "data": data_identity(spec.data),
        "seed": seed,
        "trainer": spec.trainer,
    }
    if search_steps is not None:
        payload["lr_search"] = True
    if spec.model.identity():
        payload["model"] = spec.model.identity()
    if spec.trainer == Trainer.SIMULATED:
        payload["simulated"] = spec.simulated.identity()
        # the simulated surface of a depth depends on the pairs it belongs to
        payload["planted_chain"] = list(planted_chain(spec.refine.pairs, shape.depth))
    blob = json.dumps(payload, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def scaled_length(train: TrainConfig, factor: float) -> TrainConfig:
    """``train`` with its training length (steps, tokens or tokens_per_param, whichever the
    spec gives) times ``factor``, rounded to a whole step or token (at least 1). The warm-up,
    evaluation interval and patience stay as they are: only the run's length changes."""
    if train.steps is not None:
        return dataclasses.replace(train, steps=max(1, round(train.steps * factor)))
    if train.tokens is not None:
        return dataclasses.replace(train, tokens=max(1, round(train.tokens * factor)))
    assert train.tokens_per_param is not None  # TrainConfig sets exactly one of the three
    return dataclasses.replace(train, tokens_per_param=train.tokens_per_param * factor)


def _trial_train(
    train: TrainConfig,
    lr: float | None,
    search_steps: int | None,
    length_factor: float | None = None,
) -> TrainConfig:
    """The training config of one trial: its own rate, a search trial's reduced steps, a
    length check's scaled length."""
    if length_factor is not None:
        train = scaled_length(train, length_factor)
    changes: dict[str, Any] = {}
    if lr is not None:
        changes.update(lr=float(lr), lr_search=None)
    if search_steps is not None:
        changes.update(steps=int(search_steps), tokens=None, tokens_per_param=None)
    return dataclasses.replace(train, **changes) if changes else train


def request_spec(spec: ExperimentSpec, request: TrialRequest) -> ExperimentSpec:
    """The spec a backend trains ``request`` with: its own learning rate, a search trial's
    steps, and tokens_per_param resolved to tokens (backends never see a search or a
    size-dependent length)."""
    train = _trial_train(spec.train, request.lr, request.search_steps, request.length_factor)
    if train.tokens_per_param is not None:  # the trial's own (scaled) tokens_per_param
        tokens = dataclasses.replace(spec, train=train).training_tokens(request.shape)
        train = dataclasses.replace(train, tokens=max(1, tokens), tokens_per_param=None)
    return spec if train is spec.train else dataclasses.replace(spec, train=train)


# Data fields that never change a result (where files live, guards) stay out of the identity.
_DATA_NOT_IDENTITY = ("cache_dir", "max_epochs")
# Fields added after trials were recorded: in the identity only when set off their default,
# so experiments recorded before they existed still resume without retraining.
_DATA_ADDED_DEFAULTS = {"bpe_sample_mb": 100.0}


def data_identity(data: DataConfig) -> dict[str, Any]:
    payload = {k: v for k, v in dataclasses.asdict(data).items() if k not in _DATA_NOT_IDENTITY}
    for name, default in _DATA_ADDED_DEFAULTS.items():
        if payload.get(name) == default:
            del payload[name]
    return payload


def planted_chain(pairs: Sequence[Sequence[int]], depth: int) -> tuple[int, ...]:
    """``(L, partner(L), ...)`` following the configured pairs down from ``depth``."""
    partner = {int(deep): int(shallow) for shallow, deep in pairs}
    chain = [int(depth)]
    while chain[-1] in partner:
        chain.append(partner[chain[-1]])
    return tuple(chain)


@dataclass(frozen=True)
class TrialRequest:
    """One training to run: a grid cell (shape at a budget) and a seed."""

    trial_id: str
    stage: str  # a vocabulary.Stage
    cell: GridCell
    seed: int
    lr: float | None = None  # the trial's own rate; None: train.lr
    lr_source: str = vocabulary.LR_SOURCE_SPEC
    search_steps: int | None = None  # lr_search trials: the reduced-fidelity steps
    length_factor: float | None = None  # length_check trials: factor on the training length
    # Who asked (not the identity: one training may serve several pairs and rounds): the depth
    # pair's label, its refine round (Optuna trial number + 1) and the point's PointKind.
    pair: str = ""
    round: int = 0
    point_kind: str = ""

    @property
    def shape(self) -> ModelShape:
        return self.cell.shape

    @property
    def name(self) -> str:
        """Human-readable trial name used in TensorBoard and logs."""
        base = f"L{self.shape.depth}_w{self.shape.width}_s{self.seed}"
        if self.stage == Stage.LR_SEARCH:
            base += f"_lr{self.lr:.2e}"
        if self.length_factor is not None:
            base += f"_x{self.length_factor:g}"
        return f"{base}_{self.trial_id[:6]}"


def make_request(
    spec: ExperimentSpec,
    cell: GridCell,
    seed: int,
    stage: str,
    *,
    lr: float | None = None,
    lr_source: str = vocabulary.LR_SOURCE_SPEC,
    search_steps: int | None = None,
    length_factor: float | None = None,
    pair: str = "",
    round: int = 0,
    point_kind: str = "",
) -> TrialRequest:
    trial_id = trial_identity(
        spec, cell.shape, seed, lr=lr, search_steps=search_steps, length_factor=length_factor
    )
    if stage == Stage.GRID:
        point_kind = point_kind or PointKind.GRID.value
    return TrialRequest(
        trial_id,
        stage,
        cell,
        seed,
        lr,
        lr_source,
        search_steps,
        length_factor,
        pair,
        round,
        point_kind,
    )


def grid_requests(
    spec: ExperimentSpec, rates: Mapping[tuple[int, int], tuple[float, str]] | None = None
) -> list[TrialRequest]:
    """Every (depth, budget, seed) of the spec's space, deduplicated by identity. ``rates``
    maps a cell's (depth, width) to its (learning rate, source) when the rate is searched."""
    return first_point_requests(
        spec, spec.grid(), lambda cell: (rates or {}).get((cell.depth, cell.shape.width), SPEC_RATE)
    )


def first_point_requests(
    spec: ExperimentSpec,
    cells: Iterable[GridCell],
    rate_of: Callable[[GridCell], tuple[float | None, str]],
) -> list[TrialRequest]:
    """Grid trainings of ``cells`` (the grid stage's, or a later refine.waves wave's first
    points) at each of space.seeds, deduplicated by identity; ``rate_of`` gives a cell's
    (learning rate, source)."""
    requests: dict[str, TrialRequest] = {}
    for cell in cells:
        lr, source = rate_of(cell)
        for seed in spec.space.seeds:
            request = make_request(spec, cell, seed, Stage.GRID, lr=lr, lr_source=source)
            requests.setdefault(request.trial_id, request)
    return list(requests.values())


@dataclass
class TrialRecord:
    """A finished (or failed) trial: one row of trials.parquet, plus its curve."""

    trial_id: str
    stage: str
    depth: int
    width: int
    heads: int
    budget: float
    params_non_embedding: int
    params_total: int
    seed: int
    status: str
    final_val_loss: float = float("nan")
    best_val_loss: float = float("nan")
    steps: int = 0
    tokens: int = 0
    wall_time_s: float = 0.0
    tokens_per_s: float = float("nan")
    mfu: float = float("nan")  # mean over the training (time-weighted; mean_mfu)
    node: str = ""
    error: str = ""
    simulated: bool = False
    surface: str = ""  # the simulated surface (simulated.surface) of a simulated trial, else ""
    val_loss_se: float = float("nan")  # standard error of the final val/loss over eval batches
    lr: float = float("nan")  # peak learning rate the trial trained with
    lr_source: str = vocabulary.LR_SOURCE_SPEC
    parametrization: str = Parametrization.SP.value
    head_dim: int = 0
    compare: str = "params"
    tokens_per_param: float = float("nan")
    pair: str = ""  # the depth pair whose refine point asked for it ('' for a grid trial)
    round: int = 0  # that pair's refine round (Optuna trial number + 1); 0 for the grid
    point_kind: str = ""  # a vocabulary.PointKind: grid, verify, bisect or scan
    workers: int = 1  # processes the training spanned (its workers when sharded)
    gpu_seconds: float = 0.0  # wall_time_s x the GPUs it held (0 on CPU and simulated)
    # the step it stopped at before its planned end (status early_stopped); 0: not stopped so
    stopped_step: int = 0
    # the largest step any attempt of it resumed from (a checkpoint of a failed attempt or of a
    # killed driver's); 0: every attempt started from step 0
    resumed_from_step: int = 0
    # One dict per report: metric name -> value (metrics vocabulary); not a trials.parquet column.
    curve: list[dict[str, Any]] = field(default_factory=list, repr=False)
    # Loss of each held-out window at the best evaluation (vocabulary.VAL_WINDOWS): the paired
    # evaluation error of Δ (dwtune.core.refine.points); not a trials.parquet column.
    val_windows: list[float] = field(default_factory=list, repr=False)

    @property
    def completed(self) -> bool:
        return self.status in vocabulary.COMPLETED_STATUSES

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def required_fields(cls) -> set[str]:
        """Fields without a default: a record lacking one cannot be read."""
        missing = dataclasses.MISSING
        return {
            f.name
            for f in dataclasses.fields(cls)
            if f.default is missing and f.default_factory is missing
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> TrialRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})


def record_from_result(
    request: TrialRequest,
    spec: ExperimentSpec,
    curve: list[dict[str, Any]],
    status: str,
    wall_time_s: float,
    node: str = "",
    error: str = "",
    resumed_from_step: int = 0,
) -> TrialRecord:
    """Summarise a trial's reported curve into its record (``resumed_from_step``: the largest
    step an attempt of it resumed from, 0 if none did)."""
    last = curve[-1] if curve else {}
    windows = [float(v) for v in last.get(vocabulary.VAL_WINDOWS, ())]
    curve = [{k: v for k, v in r.items() if k != vocabulary.VAL_WINDOWS} for r in curve]
    val = [r[vocabulary.VAL_LOSS] for r in curve if vocabulary.VAL_LOSS in r]
    cell = request.cell
    return TrialRecord(
        trial_id=request.trial_id,
        stage=request.stage,
        depth=cell.shape.depth,
        width=cell.shape.width,
        heads=cell.shape.heads,
        budget=cell.budget,
        params_non_embedding=cell.params_non_embedding,
        params_total=cell.params_total,
        seed=request.seed,
        status=status,
        final_val_loss=float(val[-1]) if val else float("nan"),
        best_val_loss=float(min(val)) if val else float("nan"),
        steps=int(last.get(vocabulary.STEP, 0)),
        tokens=int(last.get(vocabulary.TOKENS, 0)),
        wall_time_s=float(wall_time_s),
        tokens_per_s=float(last.get(vocabulary.TOKENS_PER_S, float("nan"))),
        mfu=mean_mfu(curve),
        node=node,
        error=error,
        simulated=spec.trainer == Trainer.SIMULATED,
        surface=spec.simulated.surface if spec.trainer == Trainer.SIMULATED else "",
        val_loss_se=float(last.get(vocabulary.VAL_LOSS_SE, float("nan"))),
        lr=float(spec.train.lr if request.lr is None else request.lr),
        lr_source=request.lr_source,
        parametrization=spec.model.parametrization,
        head_dim=cell.shape.head_dim,
        compare=spec.space.compare,
        tokens_per_param=float(_trained_tokens_per_param(spec.train, request) or float("nan")),
        pair=request.pair,
        round=request.round,
        point_kind=request.point_kind,
        workers=int(last.get(vocabulary.WORKERS, 1)),
        gpu_seconds=float(wall_time_s) * float(last.get(vocabulary.GPUS, 0.0)),
        stopped_step=int(last.get(vocabulary.STEP, 0))
        if status == vocabulary.STATUS_EARLY_STOPPED
        else 0,
        resumed_from_step=int(resumed_from_step),
        curve=list(curve),
        val_windows=windows,
    )


def mean_mfu(curve: list[dict[str, Any]]) -> float:
    """The training's MFU: each report's MFU weighted by the training time it covers (its
    steps x seconds per step), i.e. its FLOPs over the peak x that time; NaN where no report
    has one (the simulated trainer: no device, no peak)."""
    done, weighted, seconds = 0, 0.0, 0.0
    for report in curve:
        step = int(report.get(vocabulary.STEP, done))
        value = float(report.get(vocabulary.MFU, math.nan))
        time = (step - done) * float(report.get(vocabulary.STEP_TIME_S, math.nan))
        done = step
        if math.isfinite(value) and math.isfinite(time) and time > 0:
            weighted, seconds = weighted + value * time, seconds + time
    return weighted / seconds if seconds > 0 else math.nan


def _trained_tokens_per_param(train: TrainConfig, request: TrialRequest) -> float | None:
    """The tokens_per_param a trial trained with (a length check's scaled one)."""
    if request.length_factor is None or train.tokens_per_param is None:
        return train.tokens_per_param
    return scaled_length(train, request.length_factor).tokens_per_param
