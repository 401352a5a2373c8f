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
from collections.abc import Sequence
from dataclasses import dataclass, field

from dwtune.core import vocabulary
from dwtune.core.budget import GridCell, ModelShape
from dwtune.core.spec import ExperimentSpec
from dwtune.core.vocabulary import Stage

IDENTITY_VERSION = 1  # bump when the trainer changes what a given identity produces
# Layout of a trial record's JSON (trials/<id>.json): bump when a field changes meaning or is
# removed, and teach storage.loaders.migrate_record to read the older version.
RECORD_SCHEMA_VERSION = 1


def trial_identity(spec: ExperimentSpec, shape: ModelShape, seed: int) -> str:
    """Stable 16-hex-digit content hash of a trial."""
    payload = {
        "v": IDENTITY_VERSION,
        "shape": dataclasses.asdict(shape),
        "train": dataclasses.asdict(spec.train),
        "data": data_identity(spec.data),
        "seed": seed,
        "trainer": spec.trainer,
    }
    if spec.trainer == "simulated":
        payload["simulated"] = spec.simulated.identity()
        # the simulated surface of a depth depends on the pairs it belongs to
        payload["planted_chain"] = list(planted_chain(spec.refine.pairs, shape.depth))
    blob = json.dumps(payload, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


# Data fields that never change a result (where files live, guards) stay out of the identity.
_DATA_NOT_IDENTITY = ("cache_dir", "max_epochs")
# Fields added after trials were recorded: in the identity only when set off their default,
# so experiments recorded before they existed still resume without retraining.
_DATA_ADDED_DEFAULTS = {"bpe_sample_mb": 100.0}


def data_identity(data) -> dict:
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

    @property
    def shape(self) -> ModelShape:
        return self.cell.shape

    @property
    def name(self) -> str:
        """Human-readable trial name used in TensorBoard and logs."""
        return f"L{self.shape.depth}_w{self.shape.width}_s{self.seed}_{self.trial_id[:6]}"


def make_request(spec: ExperimentSpec, cell: GridCell, seed: int, stage: str) -> TrialRequest:
    return TrialRequest(trial_identity(spec, cell.shape, seed), stage, cell, seed)


def grid_requests(spec: ExperimentSpec) -> list[TrialRequest]:
    """Every (depth, budget, seed) of the spec's space, deduplicated by identity."""
    requests: dict[str, TrialRequest] = {}
    for cell in spec.grid():
        for seed in spec.space.seeds:
            request = make_request(spec, cell, seed, Stage.GRID)
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
    mfu: float = float("nan")
    node: str = ""
    error: str = ""
    simulated: bool = False
    surface: str = ""  # the simulated surface (simulated.surface) of a simulated trial, else ""
    val_loss_se: float = float("nan")  # standard error of the final val/loss over eval batches
    # One dict per report: metric name -> value (metrics vocabulary); not a trials.parquet column.
    curve: list[dict] = field(default_factory=list, repr=False)

    @property
    def completed(self) -> bool:
        return self.status in vocabulary.COMPLETED_STATUSES

    def to_json(self) -> dict:
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
    def from_json(cls, raw: dict) -> TrialRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})


def record_from_result(
    request: TrialRequest,
    spec: ExperimentSpec,
    curve: list[dict],
    status: str,
    wall_time_s: float,
    node: str = "",
    error: str = "",
) -> TrialRecord:
    """Summarise a trial's reported curve into its record."""
    last = curve[-1] if curve else {}
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
        mfu=float(last.get(vocabulary.MFU, float("nan"))),
        node=node,
        error=error,
        simulated=spec.trainer == "simulated",
        surface=spec.simulated.surface if spec.trainer == "simulated" else "",
        val_loss_se=float(last.get(vocabulary.VAL_LOSS_SE, float("nan"))),
        curve=list(curve),
    )
