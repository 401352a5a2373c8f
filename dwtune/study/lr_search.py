"""Per-shape learning-rate search: one resumable Optuna study per cell, trained on Ray Tune.

Why dwtune's own Optuna study (ask/tell) and not Ray Tune's ``OptunaSearch``: resumability.
dwtune never restores a Tune experiment (``Tuner.restore`` cannot add trials, and a killed
driver's searcher state would die with it); its experiment store is the source of truth. A
study per cell in journal storage (``lr_search/L<depth>_w<width>.journal``, as the refine stage
keeps its bisection) records every proposed rate the moment it is asked, so a killed driver
resumes with the same proposals: a rate asked but not told is trained again under the same
trial identity, and the runner reuses its record if it had finished; a told rate is never
proposed again. OptunaSearch would have to be restored with the Tune experiment and would
re-propose rates on a fresh driver, training new trials.

Each cell's search trains ``trials`` rates, drawn log-uniformly in [min, max] by Optuna's TPE
sampler in two rounds (the first half random start-up trials, the second half guided by them),
for ``fidelity`` of the real training's steps. The rates of all cells of a round are one Tune
run, under ASHA per cell (:meth:`TuneRunner.run_lr_search`), which stops poor rates early. The
cell's best rate (:func:`dwtune.core.lr_search.best_rate`) then trains the real grid or refine
trials. Search trials are records of stage ``lr_search`` with their own identities (rate,
search steps): rerunning trains nothing.

What it cannot show: the best rate at the reduced fidelity is assumed to be the best at the
full length (the optimum drifts with training length); the rate is searched for the cell's
first seed only.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, TrialState

from dwtune.core import vocabulary
from dwtune.core.budget import GridCell
from dwtune.core.lr_search import SearchOutcome, best_rate, interpolate_rate, search_steps
from dwtune.core.records import TrialRecord, TrialRequest, make_request
from dwtune.core.spec import ExperimentSpec
from dwtune.storage import loaders
from dwtune.storage.store import ExperimentStore

RunSearch = Callable[[list[TrialRequest]], list[TrialRecord]]
CellKey = tuple[int, int]  # (depth, width)
Rate = tuple[float, str]  # (learning rate, vocabulary.LR_SOURCES value)

LR_PARAM = "lr"
STUDY_NAME = "lr_search"


def cell_key(cell: GridCell) -> CellKey:
    return cell.shape.depth, cell.shape.width


def study_path(store: ExperimentStore, key: CellKey) -> Path:
    return store.root / vocabulary.LR_SEARCH_DIR / f"L{key[0]}_w{key[1]}{vocabulary.JOURNAL_SUFFIX}"


def _open_study(path: Path, seed: int, startup: int) -> optuna.Study:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Optuna appends to the journal: a link planted there would have it write another file
    advice = f"remove {path.name} and rerun: its search starts again, recorded trials are reused"
    loaders.refuse_link(path, advice)
    backend = optuna.storages.journal.JournalFileBackend(str(path))
    return optuna.create_study(
        study_name=STUDY_NAME,
        storage=optuna.storages.JournalStorage(backend),
        sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup),
        direction="minimize",
        load_if_exists=True,
    )


class CellSearch:
    """The search of one cell: its study, its search trials' requests, its best rate."""

    def __init__(self, spec: ExperimentSpec, store: ExperimentStore, cell: GridCell):
        self.spec, self.store, self.cell = spec, store, cell
        self.config = spec.train.lr_search
        self.steps = search_steps(spec.training_steps(cell.shape), self.config.fidelity)
        self.round_size = math.ceil(self.config.trials / 2)
        seed = zlib.crc32(f"{cell.shape.depth}x{cell.shape.width}".encode())
        self.study = _open_study(study_path(store, cell_key(cell)), seed, self.round_size)
        self.distribution = FloatDistribution(self.config.min, self.config.max, log=True)

    def _trials(self, *states: TrialState) -> list[FrozenTrial]:
        return self.study.get_trials(deepcopy=False, states=states or None)

    def request(self, trial: FrozenTrial) -> TrialRequest:
        return make_request(
            self.spec,
            self.cell,
            self.spec.space.seeds[0],
            vocabulary.Stage.LR_SEARCH,
            lr=trial.params[LR_PARAM],
            lr_source=vocabulary.LR_SOURCE_PROPOSED,
            search_steps=self.steps,
        )

    def next_round(self) -> list[FrozenTrial]:
        """Trials to train now: those asked but never told (a killed driver's), else a new
        round of proposals; empty once every trial is told."""
        pending = self._trials(TrialState.RUNNING)
        if pending:
            return pending
        asked = len(self._trials())
        for _ in range(min(self.round_size, self.config.trials - asked)):
            self.study.ask({LR_PARAM: self.distribution})
        return self._trials(TrialState.RUNNING)

    def tell(self, trials: Sequence[FrozenTrial], records: Sequence[TrialRecord]) -> None:
        for trial, record in zip(trials, records, strict=True):
            loss = record.final_val_loss
            if record.completed and math.isfinite(loss):
                self.study.tell(trial.number, loss)
            else:
                self.study.tell(trial.number, state=TrialState.FAIL)

    def outcomes(self) -> list[SearchOutcome]:
        outcomes = []
        for trial in self._trials(TrialState.COMPLETE, TrialState.FAIL):
            record = self.store.read_record(self.request(trial).trial_id)
            if record is not None:
                outcomes.append(
                    SearchOutcome(record.lr, record.status, record.final_val_loss, record.steps)
                )
        return outcomes

    def best(self) -> Rate:
        """The best rate and its source; ``train.lr`` (the range's midpoint) only when every
        search trial failed."""
        rate = best_rate(self.outcomes(), self.steps)
        if rate is None:
            return self.spec.train.lr, vocabulary.LR_SOURCE_SPEC
        return rate, vocabulary.LR_SOURCE_SEARCH


def search_rates(
    spec: ExperimentSpec,
    store: ExperimentStore,
    cells: Sequence[GridCell],
    run_search: RunSearch,
) -> dict[CellKey, Rate]:
    """Search every distinct cell (or resume); the rounds of all cells train together."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    searches = {cell_key(c): CellSearch(spec, store, c) for c in cells}
    while True:
        rounds = {key: search.next_round() for key, search in searches.items()}
        requests = [searches[k].request(t) for k, trials in rounds.items() for t in trials]
        if not requests:
            break
        records = iter(run_search(requests))
        for key, trials in rounds.items():
            searches[key].tell(trials, [next(records) for _ in trials])
    return {key: search.best() for key, search in searches.items()}


def interpolated_rate(grid_rates: dict[CellKey, Rate], cell: GridCell) -> Rate:
    """A refine cell's rate from its depth's searched grid rates, interpolated in ln width."""
    known = [
        (width, rate)
        for (depth, width), (rate, source) in grid_rates.items()
        if depth == cell.shape.depth and source == vocabulary.LR_SOURCE_SEARCH
    ]
    return interpolate_rate(known, cell.shape.width), vocabulary.LR_SOURCE_INTERPOLATED


class RateBook:
    """Rates for the grid and refine stages of a study whose ``train.lr`` is a search."""

    def __init__(self, spec: ExperimentSpec, store: ExperimentStore, run_search: RunSearch):
        self.spec, self.store, self.run_search = spec, store, run_search
        self.rates: dict[CellKey, Rate] = {}
        self.grid_rates: dict[CellKey, Rate] = {}

    def search_grid(self, cells: Sequence[GridCell]) -> dict[CellKey, Rate]:
        self.grid_rates = search_rates(self.spec, self.store, cells, self.run_search)
        self.rates.update(self.grid_rates)
        return self.grid_rates

    def rate_for(self, cell: GridCell) -> Rate:
        """A refine cell's rate: its own search, or the grid's interpolated
        (``train.lr.refine``)."""
        key = cell_key(cell)
        if key not in self.rates:
            if self.spec.train.lr_search.refine == "interpolate":
                self.rates[key] = interpolated_rate(self.grid_rates, cell)
            else:
                found = search_rates(self.spec, self.store, [cell], self.run_search)
                self.rates.update(found)
        return self.rates[key]
