"""The study pipeline as a library: grid → refine (→ length check) → export → fit → report.

``dwtune run`` and ``dwtune refine`` are thin wrappers around this module, and a notebook or
another program drives a study the same way::

    from dwtune import Study

    results = Study.from_yaml("search_spaces/simulated.yaml").run(storage="experiments")
    results.fit["b"], results.transitions, results.project("175B")

``Study.run(runner="local")`` trains in this process, one trial after another, without Ray
(for the simulated backend and small studies); the records are those the Ray runner writes.

Every stage resumes: a finished trial is never trained again, a refined pair is not refined again.
Ray is started only by [Study.run][dwtune.study.pipeline.Study.run] and
[Study.refine][dwtune.study.pipeline.Study.refine] (and by ``refine`` only when something is
left to train).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import pandas as pd

from dwtune.core.errors import InputError
from dwtune.core.projection import project_budget
from dwtune.core.records import grid_requests
from dwtune.core.refine.transition import Transition
from dwtune.core.spec import ExperimentSpec, load_spec, spec_from_dict
from dwtune.core.units import parse_size
from dwtune.core.vocabulary import (
    CURVES_FILE,
    LENGTH_CHECK_FILE,
    LEVEL,
    PAIR_DELTAS_FILE,
    PROJECTIONS_FILE,
    REPORT_FILE,
    SIMULATED_COLUMN,
    TRANSITIONS_FILE,
    TRIALS_FILE,
    FitStatus,
    Runner,
    Stage,
)
from dwtune.storage.experiment import ExperimentReader, export_experiment
from dwtune.storage.store import ExperimentStore
from dwtune.study.fit_stage import write_fit
from dwtune.study.forecast import RefineForecast
from dwtune.study.progress import StudyProgress
from dwtune.study.runners.base import reusable_records
from dwtune.study.runners.cluster_address import check_address, check_answers
from dwtune.study.trackers import Trackers

if TYPE_CHECKING:  # the runner's module imports Ray Tune: only when a batch needs it
    from dwtune.study.runners.ray_tune import TuneRunner

DEFAULT_STORAGE = "experiments"


class FitRecord(dict):
    """fit.json as a dict (``fit["b"]``), also read as attributes (``fit.b``), with
    ``to_frame()`` (the fitted points) and a one-line repr."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"fit.json has no {name!r} (keys: {', '.join(self)})") from None

    def to_dict(self) -> dict:
        return dict(self)

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.get("points", []))

    def __repr__(self) -> str:
        tag = " SIMULATED" if self.get(SIMULATED_COLUMN) else ""
        if self.get("status") != FitStatus.FITTED:
            return f"<FitRecord{tag}: {self.get('status')}: {self.get('reason', '')}>"
        return (
            f"<FitRecord{tag}: ln dx* = {self['a']:.3f}(±{self['se_a']:.3f}) + "
            f"{self['b']:.4f}(±{self['se_b']:.4f})·L from {self['n_points']} transitions "
            f"({self.get('method', '')}), R²={self['r2']:.3f}>"
        )


class StudyResults:
    """What an experiment directory holds, handed out as DataFrames and dicts (read on access,
    through the store's reader): trials, curves, transitions, pair_deltas, length_check,
    projections (tables), fit (fit.json), report (report.md's path)."""

    TABLES: ClassVar[dict[str, str]] = {
        "trials": TRIALS_FILE,
        "curves": CURVES_FILE,
        "transitions": TRANSITIONS_FILE,
        "pair_deltas": PAIR_DELTAS_FILE,
        "length_check": LENGTH_CHECK_FILE,
        "projections": PROJECTIONS_FILE,
    }

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._reader = ExperimentReader(root)

    def _table(self, name: str) -> pd.DataFrame:
        if not self._reader.has(name):
            raise InputError(f"{self.root / name}: no such file; run the study (`Study.run`) first")
        return self._reader.table(name)

    @property
    def tables(self) -> list[str]:
        """The names of the tables this directory holds (attributes of this object)."""
        return [name for name, file in self.TABLES.items() if self._reader.has(file)]

    @property
    def trials(self) -> pd.DataFrame:
        """One row per trained model (shape, seed, stage, final and best losses, timing)."""
        return self._table(TRIALS_FILE)

    @property
    def curves(self) -> pd.DataFrame:
        """One row per reported step of every trial (trial_id, step, tokens, losses)."""
        return self._table(CURVES_FILE)

    @property
    def transitions(self) -> pd.DataFrame:
        """One row per refined depth pair: status, N* and its intervals, statement."""
        return self._table(TRANSITIONS_FILE)

    @property
    def pair_deltas(self) -> pd.DataFrame:
        """The refine stage's paired Δ = loss_deep − loss_shallow per pair and size."""
        return self._table(PAIR_DELTAS_FILE)

    @property
    def length_check(self) -> pd.DataFrame:
        """N* at other training lengths (refine.length_check), where configured."""
        return self._table(LENGTH_CHECK_FILE)

    @property
    def projections(self) -> pd.DataFrame:
        """The fit stage's projections (fit.budgets) with intervals."""
        return self._table(PROJECTIONS_FILE)

    @property
    def fit(self) -> FitRecord:
        """fit.json: a, b, their errors and intervals (status FitStatus.FITTED), or the reason."""
        return FitRecord(self._reader.fit_record())

    @property
    def report(self) -> Path:
        return self.root / REPORT_FILE

    def project(self, budget, level: float = LEVEL):
        """Optimal depth and width at ``budget`` (parameters, or a size such as '175B'): a
        BudgetProjection; for a list of budgets, ``Projections``."""
        law, _ = self._reader.law()
        if isinstance(budget, str | int | float):
            return project_budget(law, parse_size(budget, field="budget"), level)
        from dwtune.study.api import project_law

        return project_law(law, budget, None, level)

    def __repr__(self) -> str:
        return f"<StudyResults {self.root}: {', '.join(self.tables) or 'no tables yet'}>"


class Study:
    """One study: a spec and the experiment directory it runs in."""

    def __init__(self, spec: ExperimentSpec, store: ExperimentStore | None = None):
        self.spec, self.store = spec, store

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: Iterable[str] = ()) -> Study:
        """The study of a spec file, with ``KEY=VALUE`` overrides (``"train.steps=100"``)."""
        return cls(load_spec(path, overrides))

    @classmethod
    def from_dict(cls, raw: Mapping[str, object], overrides: Iterable[str] = ()) -> Study:
        """The study of a spec mapping (shaped like the YAML file)."""
        return cls(spec_from_dict(dict(raw), overrides=overrides))

    def __repr__(self) -> str:
        where = self.store.root if self.store is not None else "(no experiment folder yet)"
        return f"<Study {self.spec.name!r} in {where}>"

    @classmethod
    def open(cls, experiment_dir: str | Path) -> Study:
        """An existing experiment directory, with the spec it was created with."""
        root = Path(experiment_dir).expanduser()
        if not root.is_dir():
            raise InputError(f"{root}: no such experiment directory; run `dwtune run SPEC` first")
        store = ExperimentStore(root)
        return cls(store.load_spec(), store)

    @property
    def results(self) -> StudyResults:
        return StudyResults(self._store().root)

    def _store(self, storage: str | Path | None = None) -> ExperimentStore:
        if storage is not None:
            self.store = ExperimentStore.for_spec(storage_root(storage), self.spec)
        elif self.store is None:
            self.store = ExperimentStore.for_spec(storage_root(DEFAULT_STORAGE), self.spec)
        return self.store

    def run(
        self,
        storage: str | Path | None = None,
        address: str | None = None,
        grid_only: bool = False,
        progress: StudyProgress | None = None,
        runner: str = "ray",
        log_to: Iterable[str] = (),
    ) -> StudyResults:
        """Grid, refine, export, fit and report (grid and export only with ``grid_only``).

        ``runner``: ``"ray"`` (Ray Tune, trials in parallel) or ``"local"`` (this process, one
        trial after another: for the simulated backend and small studies). ``log_to``:
        trackers (``"wandb"``, ``"mlflow"``) beside the spec's ``trackers.log_to``
        (``dwtune.study.trackers``)."""
        check_address(address)  # malformed: refused before anything starts
        _check_runner(runner, self.spec)
        store, progress = self._store(storage), progress or StudyProgress()
        trackers = _trackers(self.spec, store, runner, log_to)  # a missing extra: one line
        # Lock first: a refused second driver must not touch the running experiment's spec.
        with store.driver_lock():
            store.initialise(self.spec)
            store.records()  # a corrupt record stops us here, before Ray starts
            forecaster = _begin(progress, self.spec, store, forecast=runner != "local")
            try:
                with contextlib.ExitStack() as stack:
                    # Ray starts with the first batch that trains something: rerunning a
                    # finished study (or one whose grid is recorded) needs no Ray instance for
                    # what it reuses; once up, it serves every stage of the study.
                    trainer = (
                        local_runner(self.spec, store)
                        if runner == "local"
                        else ray_on_first_batch(
                            stack, self.spec, store, address, progress, trackers
                        )
                    )
                    rates = searched_rates(self.spec, store, trainer, progress)  # lr search
                    _stage(progress, "grid")
                    trainer.run(grid_requests(self.spec, rates.grid_rates if rates else None))
                    if not grid_only and self.spec.refine.pairs:
                        rate_for = rates.rate_for if rates else None
                        _stage(progress, "refine")
                        stage = refine_stage(self.spec, store, progress, rate_for)
                        transitions = stage.run_on(trainer)
                        length_check(self.spec, store, stage, transitions, trainer.run, progress)
                _stage(progress, "export", "exporting trials.parquet and curves.parquet")
                trials_path, curves_path = export_experiment(store)
                progress.note(f"wrote {trials_path} and {curves_path}")
                if not grid_only:
                    finish(store, progress, trackers)
            finally:
                _close(progress, forecaster)
        return StudyResults(store.root)

    def refine(
        self,
        address: str | None = None,
        progress: StudyProgress | None = None,
        runner: str = "ray",
        log_to: Iterable[str] = (),
    ) -> tuple[list[Transition], StudyResults]:
        """The refine stage alone (or its resumption), then export, fit and report
        (``runner`` and ``log_to`` as in [run][dwtune.study.pipeline.Study.run])."""
        store = self._store()
        _check_runner(runner, self.spec)
        trackers = _trackers(self.spec, store, runner, log_to)
        if not self.spec.refine.pairs:
            raise InputError(
                f"{store.spec_path}: refine.pairs is empty; list [shallower, deeper] "
                f"depth pairs under refine: and run `dwtune run SPEC` again"
            )
        check_address(address)  # malformed: refused even when nothing needs training
        with store.driver_lock():
            stage = refine_stage(self.spec, store, progress)  # bad pairs fail before Ray
            forecaster = _begin(progress, self.spec, store, forecast=runner != "local")
            try:
                with contextlib.ExitStack() as stack:
                    trainer = (
                        local_runner(self.spec, store)
                        if runner == "local"
                        else ray_on_first_batch(
                            stack, self.spec, store, address, progress, trackers
                        )
                    )
                    rates = searched_rates(self.spec, store, trainer, progress)  # recorded
                    stage.set_rate_for(rates.rate_for if rates else None)
                    _stage(progress, "refine")
                    transitions = stage.run_on(trainer)
                    length_check(self.spec, store, stage, transitions, trainer.run, progress)
                _stage(progress, "export", "exporting trials.parquet and curves.parquet")
                export_experiment(store)
                finish(store, progress, trackers)
            finally:
                _close(progress, forecaster)
        return transitions, StudyResults(store.root)


RUNNERS = tuple(Runner)


def _check_runner(runner: str, spec: ExperimentSpec) -> None:
    if runner not in RUNNERS:
        raise InputError(f"runner: got {runner!r}; expected one of {', '.join(RUNNERS)}")
    if runner == "local" and spec.train.lr_search is not None:
        raise InputError(
            "runner: 'local' trains no learning-rate search (train.lr is a search); give "
            "train.lr a number, or use runner='ray'"
        )


def _trackers(spec: ExperimentSpec, store: ExperimentStore, runner: str, log_to: Iterable[str]):
    """The study's trackers (None: none); the local runner logs to none (trials are logged by
    Ray Tune's callbacks)."""
    trackers = Trackers.resolve(spec, store.root, log_to)
    if trackers is not None and runner == "local":
        raise InputError(
            f"--log-to {','.join(trackers.names)}: trials are logged through Ray Tune's "
            f"callbacks, which runner 'local' has none of; use runner 'ray' (the default)"
        )
    return trackers


def local_runner(spec: ExperimentSpec, store: ExperimentStore):
    """Trials trained in this process, one after another (no Ray)."""
    from dwtune.study.runners.local import LocalRunner

    return LocalRunner(spec, store)


def ray_on_first_batch(stack, spec, store, address, progress, trackers=None) -> StartOnFirstBatch:
    """The stages' runner: a TuneRunner (entered on ``stack``) once a batch needs training."""

    def start() -> TuneRunner:
        # A wrong address is refused before the runner's imports (Ray Tune, and torch through
        # tensorboardX): after them it took 16 s under load
        check_answers(address)
        from dwtune.study.runners.ray_tune import TuneRunner

        runner = TuneRunner(spec, store, address=address, progress=progress, trackers=trackers)
        return stack.enter_context(runner)

    return StartOnFirstBatch(start, store, progress)


def refine_stage(spec: ExperimentSpec, store: ExperimentStore, progress, rate_for=None):
    from dwtune.study.refine import RefineStage  # optuna: only when a stage refines

    return RefineStage(spec, store, progress, rate_for)


def length_check(spec: ExperimentSpec, store, stage, transitions, run_trials, progress) -> None:
    """After the refine stage: each bracketed N* at the lengths of refine.length_check."""
    if not spec.refine.length_check:
        return
    from dwtune.study.length_check import run_length_check  # optuna, via the refine stage

    factors = ", ".join(f"{f:g}" for f in spec.refine.length_check)
    _stage(progress, "length_check", f"re-estimating each bracketed N* at {factors}× the length")

    say = getattr(progress, "note", None) if progress is not None else None
    run_length_check(spec, store, stage, transitions, run_trials, say or (lambda _line: None))


def searched_rates(spec: ExperimentSpec, store: ExperimentStore, runner, progress=None):
    """The grid's per-cell learning-rate search (None when train.lr is a number)."""
    if spec.train.lr_search is None:
        return None
    _stage(progress, "lr_search", "searching each grid cell's learning rate")
    from dwtune.study.lr_search import RateBook  # optuna: only when rates are searched

    book = RateBook(spec, store, runner.run_lr_search)
    book.search_grid(spec.grid())
    return book


def finish(store: ExperimentStore, progress=None, trackers: Trackers | None = None) -> None:
    """The fit stage (fit.json, projections.parquet), then the report that draws them; with
    ``trackers``, the refine decisions and the fit logged to them as runs of their own."""
    _stage(progress, "fit", "fitting ln dx* = a + b·L to the transitions")
    write_fit(store.root)
    _stage(progress, "report", "drawing the figures and writing report.md")
    from dwtune.outputs.report import write_report  # matplotlib: only when a report is drawn

    write_report(store.root)
    if trackers is not None:
        if progress is not None:
            names = ", ".join(trackers.names)
            progress.note(f"logging the refine decisions and the fit to {names}")
        trackers.log_stages(store.root)


def _begin(
    progress, spec: ExperimentSpec, store: ExperimentStore, forecast: bool
) -> RefineForecast | None:
    """The display learns of the study; with ``forecast`` (Ray runs) it also gets the refine
    forecast, from a child process that the caller stops with the study."""
    study = getattr(progress, "study", None)
    if study is not None:
        study(spec)
    return _forecast_refine(progress, spec, store) if forecast else None


def _forecast_refine(
    progress: object, spec: ExperimentSpec, store: ExperimentStore
) -> RefineForecast | None:
    """Start computing the planner's estimate of each pair's refine trainings (the ETA's
    total) while the grid trains (dwtune.study.forecast). A study whose refine stage has begun
    keeps the display's round counting: its pairs' earlier trainings were asked for by another
    run."""
    forecast = getattr(progress, "forecast", None)
    if forecast is None or not spec.refine.pairs:
        return None
    if any(record.stage == Stage.REFINE for record in store.records()):
        return None
    return RefineForecast(spec, forecast)


def _stage(progress, name: str, message: str = "") -> None:
    """Tell the display the study moved on (any progress object without ``stage``: a note)."""
    if progress is None:
        return
    stage = getattr(progress, "stage", None)
    if stage is not None:
        stage(name, message)
    elif message:
        progress.note(message)


def _close(progress, forecast: RefineForecast | None = None) -> None:
    if forecast is not None:
        forecast.stop()
    close = getattr(progress, "close", None)
    if close is not None:
        close()


def storage_root(storage: str | Path) -> Path:
    """The experiment root as an absolute path (trials and Tune change working dirs)."""
    if "://" in str(storage):
        raise InputError(
            f"--storage: got {storage!r}; expected a filesystem path (dwtune keeps its records "
            f"as files); on a cluster mount shared storage (EFS, NFS) on every node and pass "
            f"its path"
        )
    return Path(storage).expanduser().resolve()


class StartOnFirstBatch:
    """Starts Ray for the first batch only: a finished stage resumes in a second, not ten.

    With ``store``, a batch whose every request is already recorded (and reusable, see
    ``reusable_record``) before Ray is up is answered from the
    records, with the runner's "already recorded" line, and starts nothing.
    """

    def __init__(
        self,
        start: Callable,
        store: ExperimentStore | None = None,
        progress: StudyProgress | None = None,
    ):
        self.start, self.runner = start, None
        self.store, self.progress = store, progress

    def run(self, requests: list) -> list:
        recorded = self._all_recorded(requests)
        return recorded if recorded is not None else self._started().run(requests)

    def run_lr_search(self, requests: list) -> list:
        recorded = self._all_recorded(requests)
        return recorded if recorded is not None else self._started().run_lr_search(requests)

    def run_feed(self, feed) -> None:
        """Train a ``RequestFeed``: what the records answer needs no
        Ray; Ray starts once something is left to train."""
        if self.runner is None and self.store is not None:
            reused: list = []
            feed.on_reuse = reused.extend
            feed.start(lambda r: reusable_records(self.store, [r], set()).get(r.trial_id))
            feed.on_reuse = None
            if self.progress and reused:
                self.progress.begin(reused[0].stage, [], reused)
            if feed.done:
                return
        self._started().run_feed(feed)

    def _started(self):
        if self.runner is None:
            self.runner = self.start()
        return self.runner

    def _all_recorded(self, requests: list) -> list | None:
        """Before Ray is up, the records of ``requests`` when none needs training, else None.
        Nothing has failed under this driver yet, so a recorded failure is retried."""
        if self.runner is not None or self.store is None:
            return None
        reused = reusable_records(self.store, requests, set())
        if any(r.trial_id not in reused for r in requests):
            return None
        if self.progress and requests:
            self.progress.begin(requests[0].stage, [], list(reused.values()))
        return [reused[r.trial_id] for r in requests]
