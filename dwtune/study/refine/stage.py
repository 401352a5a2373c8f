"""The refine stage of one experiment: every pair's refiner, wave by wave, trained in rounds
or as a feed, and transitions.parquet written at the end."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence

import optuna
import pandas as pd

from dwtune.core.budget import GridCell
from dwtune.core.fit.censored import RUNNING_FIT, TransitionObservation, running_law
from dwtune.core.projection import DepthWidthLaw, reference
from dwtune.core.records import (
    SPEC_RATE,
    TrialRecord,
    TrialRequest,
    first_point_requests,
    grid_requests,
)
from dwtune.core.refine.design import RefineDesign, design_for
from dwtune.core.refine.early import (
    PointNoise,
)
from dwtune.core.refine.first_points import (
    PairStart,
    pair_start,
)
from dwtune.core.refine.outcome import decide_points
from dwtune.core.refine.transition import Transition
from dwtune.core.spec import ExperimentSpec
from dwtune.core.vocabulary import (
    Stage,
    Trainer,
)
from dwtune.storage import fit_points
from dwtune.storage.experiment import ExperimentWriter
from dwtune.storage.store import ExperimentStore
from dwtune.storage.tables import transition_rows
from dwtune.study.background import Background
from dwtune.study.feed import RequestFeed
from dwtune.study.journal import Journals
from dwtune.study.refine.pair import PairRefiner, Progress, RateFor, Rounds
from dwtune.study.runners.local import LocalRunner

RunTrials = Callable[[list[TrialRequest]], list[TrialRecord]]


def pair_starts(
    spec: ExperimentSpec,
    design: RefineDesign,
    records: Sequence[TrialRecord],
    pairs: Sequence[tuple[int, int]] | None = None,
    law: DepthWidthLaw | None = None,
    earlier: Mapping[int, Collection[float]] | None = None,
) -> list[PairStart]:
    """The first points of a wave's ``pairs`` (default: the first wave's, placed by
    fit.reference; ``earlier``: each depth's first sizes in the waves before); InputError for a
    depth the grid never finished."""
    seeds, convention = spec.space.seeds, spec.model.size_convention
    pairs = design.waves()[0] if pairs is None else pairs
    earlier = earlier or {}
    # a search trial trains the cell's shape at reduced fidelity: never a grid point
    records = [r for r in records if r.stage != Stage.LR_SEARCH]
    starts = []
    for pair in pairs:
        budgets = design.pair_budgets(pair, law)  # the pair's first points
        # its shallower net's size trend
        trend_budgets = design.shallow_budgets(pair, law, earlier.get(pair[0], ()))
        start = pair_start(records, pair, budgets, seeds, convention, trend_budgets)
        decided = decide_points(start.points, spec.refine)
        starts.append(dataclasses.replace(start, points=tuple(decided)))
    return starts


class RefineStage:
    """The refine stage of one experiment; building it checks every pair of the first wave
    before any training.

    Bad input (a pair whose depth the grid never finished, a corrupt journal) is an InputError
    here, before Ray starts or anything is trained. With ``refine.waves`` above 1 (law
    design) the later waves' pairs are opened once the waves before them are done: their
    first points are trained then, at the sizes of the law fitted on the pairs refined so
    far (:func:`dwtune.core.fit.censored.running_law`).
    """

    def __init__(
        self,
        spec: ExperimentSpec,
        store: ExperimentStore,
        progress=None,
        rate_for: RateFor | None = None,
        journals: Journals | None = None,
    ):
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.spec, self.store = spec, store
        self.say = _say(progress)
        self.watch = getattr(progress, "pair", None)
        self.rate_for = rate_for
        self.design = design_for(spec)  # the one choice of design, handed to every pair
        self.waves = self.design.waves()
        self.laws: list[DepthWidthLaw] = []  # the law that placed each opened wave's sizes
        self.refiners: list[PairRefiner] = []  # the opened waves' pairs, in refine.pairs order
        self._sizes: dict[int, set[float]] = {}  # each depth's first sizes in the opened waves
        self._background: Background | None = None
        # every pair's study in one storage, opened (checked, its stale lock removed) once;
        # or in memory (ScratchJournals) where nobody watches or resumes the stage
        self.journals = journals or Journals(store, self.say)
        # the first wave's cells count for the later waves' sizes
        first = self.design.first_wave_cells()
        self._open(self.waves[0], reference(spec.fit.reference), first)

    def set_rate_for(self, rate_for: RateFor | None) -> None:
        """Searched rates for the refine trainings (``dwtune refine`` finds them after the
        stage is built)."""
        self.rate_for = rate_for
        for refiner in self.refiners:
            refiner.rate_for = rate_for

    def _open(
        self, wave: Sequence[tuple[int, int]], law: DepthWidthLaw, cells: Sequence[GridCell]
    ) -> list[PairRefiner]:
        """The refiners of a wave whose first points (``cells``, placed by ``law``) are
        recorded."""
        records = self.store.records()
        starts = pair_starts(self.spec, self.design, records, wave, law, self._sizes)
        refiners = [
            PairRefiner(self.spec, self.store, start, self.say, self.design, self.journals)
            for start in starts
        ]
        for refiner in refiners:
            refiner.rate_for, refiner.watch = self.rate_for, self.watch
            refiner.background = self._background
        for cell in cells:  # the next wave's sizes count these (the design's depth_budgets)
            self._sizes.setdefault(cell.depth, set()).add(cell.budget)
        order = [tuple(pair) for pair in self.spec.refine.pairs]
        self.refiners = sorted([*self.refiners, *refiners], key=lambda r: order.index(r.pair))
        self.laws.append(law)
        return refiners

    def _next_wave(
        self, index: int, done: Sequence[Transition], run_trials: RunTrials | None
    ) -> list[PairRefiner]:
        """Wave ``index`` (1 or more) opened: its first points trained at the sizes of the law
        fitted on ``done``, the transitions of the waves before it."""
        if run_trials is None:
            raise ValueError("refine.waves > 1: the later waves' first points need run_trials")
        wave = self.waves[index]
        law = running_law(observations(done), reference(self.spec.fit.reference))
        cells = self.design.wave_cells(wave, law, self._sizes)
        rate_of = self.rate_for or (lambda _cell: SPEC_RATE)
        requests = first_point_requests(self.spec, cells, rate_of)
        self.say(
            f"[refine] wave {index + 1} of {len(self.waves)}: pairs "
            f"{', '.join(f'{a}-{b}' for a, b in wave)} from {describe_law(law)}; "
            f"{len(requests)} first training(s)"
        )
        run_trials(requests)
        return self._open(wave, law, cells)

    def _waves(
        self, run_trials: RunTrials | None, done: Mapping[tuple[int, int], Transition]
    ) -> Iterator[list[PairRefiner]]:
        """Each wave's refiners in turn; a later one is opened once the caller has put the
        transitions of the ones before in ``done``."""
        yield [r for r in self.refiners if r.pair in self.waves[0]]
        for index in range(1, len(self.waves)):
            yield self._next_wave(index, list(done.values()), run_trials)

    def run(self, run_trials: RunTrials) -> list[Transition]:
        """Refine every pair (or resume) in rounds, write transitions.parquet, return its rows.

        Each call of ``run_trials`` holds the next batch of every pair of the wave still
        refining, so trainings of different pairs run in parallel, but every pair waits for
        the slowest pair of the round. :meth:`run_feed` lets each pair go on as soon as its
        own points are in; both take the same decisions (a pair sees only its own records).
        """
        done: dict[tuple[int, int], Transition] = {}
        with self._background_writes():
            for refiners in self._waves(run_trials, done):
                done.update(_in_rounds(refiners, run_trials))
        return self._write([done[r.pair] for r in self.refiners])

    @contextlib.contextmanager
    def _background_writes(self) -> Iterator[None]:
        """The pairs publish their provisional N* on one background thread while they refine
        (:meth:`PairRefiner._publish`); every write is done (a failed one raised) on leaving."""
        background = Background("dwtune-pairs")
        self._background = background
        for refiner in self.refiners:
            refiner.background = background
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):  # the error in flight is the one to show
                background.close()
            raise
        else:
            background.close()
        finally:
            self._background = None
            for refiner in self.refiners:
                refiner.background = None

    def feed(self, refiners: Sequence[PairRefiner] | None = None) -> RequestFeed:
        """The rounds of ``refiners`` (default: every opened pair) as one
        :class:`~dwtune.study.feed.RequestFeed`; with refine.early_stop its ``early_context``
        tells a stopping scheduler each point's noise."""
        refiners = self.refiners if refiners is None else refiners
        feed = RequestFeed([refiner.rounds() for refiner in refiners])
        if self.spec.refine.early_stop:
            by_label = {refiner.start.label: refiner for refiner in refiners}

            def early_context(request: TrialRequest) -> PointNoise:
                return by_label[request.pair].early_context(request)

            feed.early_context = early_context
        return feed

    def run_feed(
        self, run_feed: Callable[[RequestFeed], None], run_trials: RunTrials | None = None
    ) -> list[Transition]:
        """Refine every pair (or resume) with the pairs of a wave advancing independently:
        ``run_feed(feed)`` trains the feed's requests until every pair is done (a runner's
        ``run_feed``), ``run_trials`` a later wave's first points; then transitions.parquet
        is written and its rows returned."""
        done: dict[tuple[int, int], Transition] = {}
        with self._background_writes():
            for refiners in self._waves(run_trials, done):
                feed = self.feed(refiners)
                run_feed(feed)
                if not feed.done:
                    raise RuntimeError("the runner returned before every pair was refined")
                results = feed.results_in_order()
                done.update({r.pair: t for r, t in zip(refiners, results, strict=True)})
        return self._write([done[r.pair] for r in self.refiners])

    def run_on(self, runner) -> list[Transition]:
        """:meth:`run_feed` on a runner that has ``run_feed``, else :meth:`run` in rounds."""
        run_feed = getattr(runner, "run_feed", None)
        if run_feed is not None:
            return self.run_feed(run_feed, getattr(runner, "run", None))
        return self.run(runner.run)

    def _write(self, transitions: list[Transition]) -> list[Transition]:
        writer = ExperimentWriter(self.store, self.spec.to_dict())
        writer.transitions(transitions)
        pairs = [r.pair_points() for r in self.refiners]
        writer.pair_deltas(pairs, self.spec.trainer == Trainer.SIMULATED)
        return transitions


def observations(done: Sequence[Transition]) -> list[TransitionObservation]:
    """Transitions as the fit reads them from transitions.parquet (the fit stage's rows)."""
    frame = pd.DataFrame(transition_rows(done))
    return [fit_points.observation(row, f"pair {row['pair']}") for _, row in frame.iterrows()]


def describe_law(law: DepthWidthLaw) -> str:
    """How a wave's law is named on the console: the running fit and its pairs, or the
    reference the wave fell back to."""
    line = f"(ln dx* = {law.a:.3f} + {law.b:.4f}·L)"
    if law.name == RUNNING_FIT:
        return f"the law fitted on {law.source} {line}"
    return f"fit.reference {law.name} {line}: the pairs done give no law with a rising slope"


def _in_rounds(
    refiners: Sequence[PairRefiner], run_trials: RunTrials
) -> dict[tuple[int, int], Transition]:
    """Every pair of ``refiners`` refined in rounds: each call of ``run_trials`` holds the
    next batch of every pair still refining."""
    waiting: dict[int, tuple[Rounds, list[TrialRequest]]] = {}
    done: dict[int, Transition] = {}
    for index, refiner in enumerate(refiners):
        _advance(index, refiner.rounds(), None, waiting, done)
    while waiting:
        batches = list(waiting.items())
        records = run_trials([r for _, (_, requests) in batches for r in requests])
        waiting.clear()
        for index, (rounds, requests) in batches:
            mine, records = records[: len(requests)], records[len(requests) :]
            _advance(index, rounds, mine, waiting, done)
    return {refiner.pair: done[index] for index, refiner in enumerate(refiners)}


def _advance(index: int, rounds: Rounds, records, waiting: dict, done: dict) -> None:
    """Send a pair its records; file its next batch, or its transition when it is done."""
    try:
        waiting[index] = (rounds, rounds.send(records))
    except StopIteration as finished:
        done[index] = finished.value


def run_refine(
    spec: ExperimentSpec,
    store: ExperimentStore,
    run_trials: RunTrials,
    progress=None,
    rate_for: RateFor | None = None,
    journals: Journals | None = None,
) -> list[Transition]:
    """Refine every configured pair (or resume); ``run_trials`` trains batches of requests.

    ``progress``: a :class:`dwtune.study.progress.StudyProgress` (lines go to its ``note``), any
    callable taking one line, or None. ``journals``: where the pairs' studies live (default:
    the experiment's journal file).
    """
    return RefineStage(spec, store, progress, rate_for, journals).run(run_trials)


def refine_in_process(
    spec: ExperimentSpec, store: ExperimentStore
) -> tuple[list[Transition], LocalRunner]:
    """``spec``'s grid and refine stages trained in this process, without Ray (a simulated
    spec: its records are those a Ray run writes): the transitions, and the runner that
    trained them (its ``trained`` count). Tests and benchmarks drive whole studies so."""
    store.initialise(spec)
    runner = LocalRunner(spec, store)
    runner.run(grid_requests(spec))
    return run_refine(spec, store, runner.run), runner


def _say(progress) -> Progress:
    if progress is None:
        return lambda _line: None
    return getattr(progress, "note", progress)
