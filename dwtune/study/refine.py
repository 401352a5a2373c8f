"""The refine stage: Optuna drives a noise-aware bisection of each depth pair's transition.

For each pair of ``refine.pairs`` the grid gives the first points
(:func:`dwtune.core.transitions.grid_pair`)
and an outcome: a bracket, or a censored pair. Each pair then has its own Optuna study, stored
in the experiment directory as ``refine/<Ls>-<Ld>.journal`` (journal storage, one JSON line per
event). Every point trained by the refine stage is one Optuna trial:

- ``verify``: a point that decides the outcome (a bracket end, or a censored pair's edge) is
  within noise with the seeds it has: the trial is enqueued at that budget and given seeds;
- ``bisect``: :class:`BisectionSampler` proposes ``log_n``, the midpoint in ln N of the current
  bracket (``refine.design: law``: the interpolated root of Δ, :mod:`dwtune.core.design`),
  computed from the grid points and the study's finished trials alone;
- ``extend`` (law design): a censored pair's next size beyond its decided edge.

A trial trains both depths at its budget with paired seeds (``spec.cell`` shapes, requests of
stage ``refine``, one ``run_trials`` batch per round of seeds), runs the sequential sign test
of :mod:`dwtune.core.transitions`, stores the point as the trial's ``point`` user attribute and
tells Optuna its mean Δ. So a killed stage resumes from the journal: finished trials are
replayed, a trial left running is marked failed and asked again, and its trainings are not
repeated because the runner reuses every recorded trial identity. ``transitions.parquet`` is
derived at the end, with N* and its intervals from every point
(:func:`dwtune.core.crossing.estimate_crossing`).

Journal format: unchanged. Points written before the α-spending rule load (their new fields
take defaults: no failures, not re-verified), and every decision is recomputed from the stored
Δ under the current rule, so such a journal resumes without retraining a finished trial; its
decisive points may then be re-verified, which trains only the added seeds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Collection, Generator, Iterator, Mapping, Sequence

import optuna
import pandas as pd
from optuna.trial import TrialState

from dwtune.core import vocabulary
from dwtune.core.budget import GridCell
from dwtune.core.fit.bootstrap import PairPoints
from dwtune.core.fit.censored import RUNNING_FIT, TransitionObservation, running_law
from dwtune.core.projection import DepthWidthLaw, reference
from dwtune.core.records import (
    SPEC_RATE,
    TrialRecord,
    TrialRequest,
    first_point_requests,
    grid_requests,
    make_request,
)
from dwtune.core.refine import early, signs
from dwtune.core.refine.design import RefineDesign, design_for
from dwtune.core.refine.early import (
    EarlyCall,
    EarlyRule,
    PointNoise,
    run_evals,
    seed_end_estimates,
)
from dwtune.core.refine.first_points import (
    PairGrid,
    extension_budgets,
    grid_pair,
    on_extended_trend,
)
from dwtune.core.refine.noise import Noise
from dwtune.core.refine.outcome import decide_points
from dwtune.core.refine.points import (
    PairPoint,
    make_point,
    mark_unstable,
    merge_points,
    with_early_ends,
)
from dwtune.core.refine.signs import noise_prior
from dwtune.core.refine.steps import (
    Step,
    decide_seeds,
    next_step,
    point_done,
    seed_sequence,
    seeds_wanted,
)
from dwtune.core.refine.transition import Transition, make_transition
from dwtune.core.refine.trend import SizeTrend
from dwtune.core.spec import ExperimentSpec
from dwtune.core.vocabulary import (
    SizeConvention,
    Stage,
    StepKind,
    Trainer,
    TransitionStatus,
)
from dwtune.outputs import tensorboard
from dwtune.storage import fit_points
from dwtune.storage.experiment import ExperimentWriter
from dwtune.storage.store import ExperimentStore
from dwtune.storage.tables import transition_rows
from dwtune.study.background import Background
from dwtune.study.feed import RequestFeed
from dwtune.study.journal import (
    POINT_ATTR,
    clear_stale_trials,
    open_study,
    study_path,
    trial_numbers,
    trial_points,
)
from dwtune.study.runners.local import LocalRunner

RunTrials = Callable[[list[TrialRequest]], list[TrialRecord]]
# A refine cell's (learning rate, source) when train.lr is a search (dwtune.study.lr_search).
RateFor = Callable[[GridCell], tuple[float, str]]
Progress = Callable[[str], None]
# A pair's refinement: yields request batches, is sent their records, returns its transition.
# A pair's journal as read at one moment: (trial number, point) of each told trial, and the
# bisection rounds among them.
Snapshot = tuple[list[tuple[int, PairPoint]], int]
Rounds = Generator[list[TrialRequest], list[TrialRecord], Transition]
# a pair's points (grid and told, equal-N corrected) from its Optuna study
PointsOf = Callable[[optuna.Study], list[PairPoint]]
# An early-stopped batch: (the sign the early rule settled, its seeds, each one's end estimate)
EarlyEnds = tuple[int, tuple[int, ...], tuple[float, ...]]

LOG_N = "log_n"  # the one Optuna parameter: ln of the budget to train both depths at
KIND_ATTR = "kind"  # verify | bisect
SNAP_TOLERANCE = 1e-9  # a proposal this close (in ln N) to a grid budget is that budget
PROPOSED = (StepKind.BISECT, StepKind.SCAN, StepKind.EXTEND)  # sizes the sampler proposes

# --------------------------------------------------------------------------- Optuna seam


def bisection_rounds(study: optuna.Study) -> int:
    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return sum(t.user_attrs.get(KIND_ATTR) == StepKind.BISECT for t in finished)


def budget_span(spec: ExperimentSpec) -> tuple[float, float]:
    """ln of space.budgets' least and greatest: where the law design's extensions stop."""
    return math.log(min(spec.space.budgets)), math.log(max(spec.space.budgets))


class StepSampler(optuna.samplers.BaseSampler):
    """Hands Optuna the size of the step its pair planned: a scan, bisect or extend step's
    ``log_n`` (:func:`dwtune.core.refine.steps.next_step`). The pair plans each step once,
    from its points as they stand, and sets it here before it asks for the trial; the sampler
    decides nothing itself. (A verify step's size is enqueued: Optuna asks no sampler.)"""

    def __init__(self) -> None:
        self.planned: Step | None = None

    def infer_relative_search_space(self, study, trial) -> dict:
        return {}

    def sample_relative(self, study, trial, search_space) -> dict:
        return {}

    def sample_independent(self, study, trial, param_name, param_distribution) -> float:
        step = self.planned
        if param_name != LOG_N or step is None or step.kind not in PROPOSED:
            kind = step.kind if step is not None else "none planned"
            raise RuntimeError(f"no planned size for {param_name} ({kind})")
        return step.log_n


class PairRefiner:
    """Runs one pair's study to its end and derives the pair's transition."""

    rate_for: RateFor | None = None  # set by RefineStage when the spec searches rates
    background: Background | None = None  # set by RefineStage while its pairs refine
    # told (pair, bisection rounds, bracket N_high/N_low, status, done) as the pair moves on
    watch: Callable[..., None] | None = None

    def __init__(
        self,
        spec: ExperimentSpec,
        store: ExperimentStore,
        grid: PairGrid,
        say: Progress,
        design: RefineDesign,
    ):
        self.spec, self.store, self.grid, self.say = spec, store, grid, say
        self.design = design  # where the pair's next size goes (chosen once by the stage)
        self.refine = spec.refine
        self.pair = (grid.depth_shallow, grid.depth_deep)
        count = max(self.refine.max_seeds, len(spec.space.seeds))
        self.seed_order = seed_sequence(spec.space.seeds, count)
        self.path = study_path(store, self.pair)
        self.span = budget_span(spec)
        self.sampler = StepSampler()
        self.study = open_study(self.path, self.sampler, say)
        self._asking: tuple[int, str] = (0, "")  # (round, point kind) of the round running
        # early_context's cache of the pair's measured noise and equal-N trend: None until
        # computed, and again each time a round is told (the only change to the pair's points)
        self._noise_cache: tuple[tuple[list[float], Noise] | None, SizeTrend] | None = None

    # ------------------------------------------------------------------ the loop

    def rounds(self) -> Rounds:
        """Yields each batch of requests this pair needs next, is sent their records, and
        returns the pair's transition: the stage trains the batches of all pairs together."""
        stale = clear_stale_trials(self.study)
        if stale:
            self.say(f"[refine {self.grid.label}] resuming: {stale} interrupted trial(s) redone")
        missing = self._unrecorded()
        if missing:  # a removed record: its journal point stays, its training is redone
            self.say(f"[refine {self.grid.label}] {len(missing)} training(s) without a record")
            yield missing
        while True:
            step = self.plan()
            if step.kind == StepKind.DONE:
                transition = self._transition(step)
                self._show(step, str(transition.status), done=True)
                return transition
            self._show(step, str(step.kind))
            yield from self._round(step)

    def plan(self) -> Step:
        """The pair's next step, from its grid points and its study's history alone: the points
        judged once under the pair's noise, then the step policy with the stage's design."""
        points = decide_points(self.points_of(self.study), self.refine)
        rounds = bisection_rounds(self.study)
        return next_step(
            points, self.refine, rounds, self._deep_width, self.span, design=self.design
        )

    def _show(self, step: Step, status: str, done: bool = False) -> None:
        if self.watch is None:
            return
        low, high = step.outcome.low, step.outcome.high
        bracket = math.exp(high - low) if math.isfinite(low) and math.isfinite(high) else math.nan
        rounds = bisection_rounds(self.study)
        self.watch(self.grid.label, rounds, bracket, status, done)

    def _round(self, step: Step) -> Rounds:
        if step.kind == StepKind.VERIFY:
            self.study.enqueue_trial(
                {LOG_N: math.log(step.point.budget)}, user_attrs={KIND_ATTR: str(StepKind.VERIFY)}
            )
        self.sampler.planned = step  # the size the sampler hands Optuna: planned once
        trial = self.study.ask()
        log_n = trial.suggest_float(LOG_N, *self._range())
        self.sampler.planned = None
        if step.kind in PROPOSED:
            trial.set_user_attr(KIND_ATTR, str(step.kind))
        start = max(self.refine.seeds, step.seeds, step.point.requested if step.point else 0)
        verified = step.reverifies
        self._asking = (trial.number + 1, str(step.kind))  # on this round's requests
        point = yield from self._evaluate(self._snap(log_n), step.kind, start, verified)
        trial.set_user_attr(POINT_ATTR, point.to_dict())
        for key, value in point_attrs(point).items():  # flat numbers: the dashboard's columns
            trial.set_user_attr(key, value)
        self.study.tell(trial, objective(point))
        self._noise_cache = None  # the pair's points changed: early_context measures again
        self._announce(point, trial.number + 1)
        # where the pair stands after this round, for anyone watching the journal or the
        # board: read by no decision, so computed and written off the Tune event loop, from
        # the points as they stand now (study.background)
        self._publish(self._snapshot(), "provisional", final=False)

    def _range(self) -> tuple[float, float]:
        """Bounds of ``log_n``: the grid's budgets, one e-fold of margin each side."""
        logs = [math.log(b) for b in self.spec.space.budgets]
        logs += [p.log_n for p in self.grid.points]
        return min(logs) - 1.0, max(logs) + 1.0

    def _snap(self, log_n: float) -> float:
        """The budget of ``log_n``; a grid budget exactly when it is one."""
        nearest = min(self.spec.space.budgets, key=lambda b: abs(math.log(b) - log_n))
        return nearest if abs(math.log(nearest) - log_n) < SNAP_TOLERANCE else math.exp(log_n)

    def _deep_width(self, log_n: float) -> int:
        """The deeper net's width at size ``exp(log_n)`` (what makes a proposal new or not)."""
        return self.spec.cell(self.pair[1], math.exp(log_n)).shape.width

    def _log_size(self, depth: int, budget: float) -> float:
        """ln of the size of ``depth``'s net at ``budget`` (model.size_convention)."""
        cell = self.spec.cell(depth, budget)
        total = self.spec.model.size_convention == SizeConvention.TOTAL
        return math.log(cell.params_total if total else cell.params_non_embedding)

    def _shallow_log_n(self, budget: float) -> float:
        """ln of the shallower net's size at ``budget``."""
        return self._log_size(self.pair[0], budget)

    def merged(self, told: Sequence[PairPoint]) -> list[PairPoint]:
        """The grid's points and ``told`` (a later one at the same budget replacing an earlier
        one), sorted, corrected to equal N along the shallower depth's size trend extended
        by the pair's own extension points (:func:`on_extended_trend`)."""
        return self._equal_n(told)[0]

    def _equal_n(self, told: Sequence[PairPoint]) -> tuple[list[PairPoint], SizeTrend]:
        """:meth:`merged`'s points and the extended trend they are corrected along."""
        points = merge_points(self.grid.points, told)
        extensions = extension_budgets(told)
        return on_extended_trend(points, self.grid.trend, self._shallow_log_n, extensions)

    def points_of(self, study: optuna.Study) -> list[PairPoint]:
        """:meth:`merged` over the study's finished trials."""
        return self.merged(trial_points(study))

    # ------------------------------------------------------------------ one point

    def _evaluate(self, budget: float, kind: str, start: int, verified: bool = False) -> Rounds:
        """Train both depths at ``budget`` with paired seeds until Δ's sign is decided."""
        cells = (self.spec.cell(self.pair[1], budget), self.spec.cell(self.pair[0], budget))
        total = self.spec.model.size_convention == SizeConvention.TOTAL
        size = cells[0].params_total if total else cells[0].params_non_embedding
        sizes = (math.log(size), cells[0].shape.width, cells[1].shape.width)
        records: dict[int, tuple[TrialRecord, TrialRecord]] = {}
        wanted = start
        while True:
            new_seeds = [s for s in self.seed_order[:wanted] if s not in records]
            requests = [self._request(cell, seed) for seed in new_seeds for cell in cells]
            results = yield requests  # both depths x the new seeds: one batch, in parallel
            records.update(
                {seed: (results[2 * i], results[2 * i + 1]) for i, seed in enumerate(new_seeds)}
            )
            point = self._point(budget, sizes, records, kind, wanted, verified)
            if point_done(point, kind, wanted, self.refine):
                return point
            wanted = seeds_wanted(point.decision, wanted, self.refine)

    def _request(self, cell, seed: int, asking: tuple[int, str] | None = None) -> TrialRequest:
        """A refine training; its rate from ``rate_for`` when the spec searches rates; it
        carries the pair, the round and the point kind that ask for it (``asking``, else this
        round's)."""
        lr, source = self.rate_for(cell) if self.rate_for else SPEC_RATE
        round_, kind = asking or self._asking
        return make_request(
            self.spec,
            cell,
            seed,
            Stage.REFINE,
            lr=lr,
            lr_source=source,
            pair=self.grid.label,
            round=round_,
            point_kind=kind,
        )

    def _point(self, budget, sizes, records, kind: str, requested: int, verified: bool):
        """The point of ``records`` (failed trainings included: they count against their
        depth), sign-tested together with the pair's other points."""
        told = trial_points(self.study)
        early_ends = self._early_call(budget, records, told) if self.refine.early_stop else None
        deep = {seed: pair[0] for seed, pair in records.items()}
        shallow = {seed: pair[1] for seed, pair in records.items()}
        convention = self.spec.model.size_convention
        trend = self.grid.trend
        point = make_point(budget, sizes, deep, shallow, trend, kind, requested, convention)
        point = dataclasses.replace(point, verified=verified)
        if early_ends is not None:
            sign, batch, ends = early_ends  # the batch's records hold partial losses
            point = with_early_ends(point, batch, ends, sign)
        decided = decide_points(self.merged([*told, point]), self.refine)
        return next(p for p in decided if p.budget == budget)

    # ------------------------------------------------------------------ early decisions

    def early_context(self, request: TrialRequest) -> PointNoise:
        """The pair's paired-Δ noise (sd, dof) nearest the request's size, and the equal-N
        correction (nats) of its point: what the early rule needs (refine.early_stop). The
        pair's points do not change while one of its points trains, so the scheduler that
        stops the trainings and :meth:`_early_call` that decides the point agree."""
        budget = request.cell.budget
        x_deep, x_shallow = self._log_size(self.pair[1], budget), self._shallow_log_n(budget)
        measured, trend = self._measured_noise()
        correction = trend.slope_at(x_shallow) * (x_deep - x_shallow)
        if measured is None:
            return PointNoise(math.nan, 0.0, correction)
        log_ns, noise = measured
        nearest = min(range(len(log_ns)), key=lambda i: abs(log_ns[i] - x_deep))
        return PointNoise(float(noise.sd[nearest]), float(noise.dof[nearest]), correction)

    def _measured_noise(self) -> tuple[tuple[list[float], Noise] | None, SizeTrend]:
        """(each point's ln N, the pair's noise at them) over the pair's points as they stand
        (None without points), and the equal-N trend they are corrected along. Computed once
        per state of the pair's points: the scheduler asks at every eval report of every
        training, and the points change only when a round is told (which empties the cache),
        so no ask reads the journal."""
        if self._noise_cache is not None:
            return self._noise_cache
        merged, trend = self._equal_n(trial_points(self.study))
        points = mark_unstable(merged)
        measured = None
        if points:
            noise = signs.pair_noise([p.delta_point() for p in points], noise_prior(self.refine))
            measured = ([p.log_n for p in points], noise)
        self._noise_cache = (measured, trend)
        return self._noise_cache

    def _early_call(
        self, budget: float, records: dict, told: Sequence[PairPoint]
    ) -> EarlyEnds | None:
        """(the sign the early rule settled, the seeds it settled it on, each one's end
        estimate) where the scheduler stopped a first batch of trainings at ``budget`` (their
        records hold partial losses), else None. Always the scheduler's own call: for a later
        point at the same size (a verify point reuses the batch's records, one identity one
        record, beside seeds it trains to the end) the told point the rule settled there says
        it; for a point being first trained, the call is recomputed from its records. The
        first told point with an early sign at that size is the one: a journal written while
        a verify point still took the early sign holds, after it, such a verify point over
        every seed, its added seeds' Δ extrapolated from a call the scheduler never made.
        ``told``: the pair's told points (the journal, read once by the caller)."""
        settled = [
            point
            for point in told
            if point.early_sign and math.isclose(point.budget, budget, rel_tol=1e-9)
        ]
        if settled:
            origin = settled[0]
            ends = dict(zip(origin.seeds, origin.deltas, strict=True))
            batch = tuple(seed for seed in origin.seeds if seed in records)
            return origin.early_sign, batch, tuple(ends[seed] for seed in batch)
        first = self._first_batch_call(budget, records)
        if first is None or not first[0].settled:
            return None
        call, batch, ends = first
        return call.sign, batch, ends

    def _first_batch_call(
        self, budget: float, records: dict
    ) -> tuple[EarlyCall, tuple[int, ...], tuple[float, ...]] | None:
        """(the early rule's call, the seeds, each one's end estimate) on a point's first
        batch at the step the first of its trainings stopped, as the scheduler made it
        (core/point_call); None where no training stopped or no call can be
        made there."""
        batch = tuple(sorted(records))
        pairs = [records[seed] for seed in batch]
        stopped = [r.stopped_step for pair in pairs for r in pair if r.stopped_step]
        if not stopped or not all(r.completed for pair in pairs for r in pair):
            return None
        request = self._request(self.spec.cell(self.pair[1], budget), pairs[0][0].seed)
        evals = run_evals(self.spec, request)
        rule = EarlyRule(self.refine.alpha, self.refine.early_min_fraction)
        look = early.point_call(
            rule,
            [deep.curve for deep, _ in pairs],
            [shallow.curve for _, shallow in pairs],
            min(stopped),
            evals,
            self.early_context(request),
        )
        if look is None:
            return None
        ends = seed_end_estimates(look.steps, look.deltas, evals[-1])
        return look.call, batch, tuple(float(d) for d in ends)

    # ------------------------------------------------------------------ reporting

    def _announce(self, point: PairPoint, number: int) -> None:
        verdict = {1: "deeper loses", -1: "deeper wins", 0: "within noise"}[point.decision.sign]
        if not point.decision.decided and point.n < decide_seeds(self.refine):
            verdict = f"provisional ({point.n} seed(s) decide no sign)"
        self.say(
            f"[refine {self.grid.label}] trial {number} ({point.kind}): N = "
            f"{math.exp(point.log_n):.4g} (widths {point.width_deep}/{point.width_shallow}), "
            f"Δ = {point.decision.mean:+.4f} ± {point.decision.se:.4f} over {point.n} seed(s): "
            f"{verdict}"
        )

    def _point_requests(self) -> dict[str, TrialRequest]:
        """The trainings behind this pair's journal points, by trial id."""
        requests = {}
        for number, point in trial_numbers(self.study):
            for depth in self.pair:
                cell = self.spec.cell(depth, point.budget)
                for seed in self.seed_order[: point.requested]:
                    request = self._request(cell, seed, (number + 1, point.kind))
                    requests[request.trial_id] = request
        return requests

    def _unrecorded(self) -> list[TrialRequest]:
        return [r for i, r in self._point_requests().items() if self.store.read_record(i) is None]

    def _new_trainings(self) -> int:
        """Trainings of this pair's refine points that the refine stage itself recorded."""
        records = (self.store.read_record(i) for i in self._point_requests())
        return sum(r is not None and r.stage == Stage.REFINE for r in records)

    def pair_points(self) -> PairPoints:
        """Every point of the pair as DeltaPoints: the study bootstrap's input."""
        points = mark_unstable(self.points_of(self.study))
        deltas = tuple(p.delta_point() for p in points if p.n)
        return PairPoints(self.grid.label, self.pair[0], self.pair[1], deltas)

    def _snapshot(self) -> Snapshot:
        """The journal's told points (with their trial numbers) and bisection rounds now."""
        return trial_numbers(self.study), bisection_rounds(self.study)

    def _estimate(self, reason: str, trials: int = 0, snapshot: Snapshot | None = None):
        """The pair's transition from its grid and journal points as they stand (or as
        ``snapshot`` read them earlier)."""
        told, rounds = snapshot or self._snapshot()
        points = self.merged([point for _, point in told])
        return make_transition(
            self.pair,
            points,
            self.refine,
            trials=trials,
            rounds=rounds,
            simulated=self.spec.trainer == Trainer.SIMULATED,
            reason=reason,
            convention=self.spec.model.size_convention,
        )

    def _publish(
        self, snapshot: Snapshot, reason: str, final: bool, transition: Transition | None = None
    ) -> None:
        """The pair's transition (``transition``, else estimated from ``snapshot``) as study
        attributes and on its decisions board; on the stage's background thread when it
        has one."""

        def write() -> None:
            t = transition if transition is not None else self._estimate(reason, snapshot=snapshot)
            set_study_attrs(self.study, t, final=final)
            self._board(t, snapshot[0])

        if self.background is None:
            write()
        else:
            self.background.submit(write)

    def _board(self, t: Transition, told: list[tuple[int, PairPoint]]) -> None:
        """The pair's decisions as TensorBoard scalars (tb/refine/<pair>/decisions)."""
        rounds = [{"round": number + 1, **decision_scalars(point)} for number, point in told]
        summary = {name: getattr(t, name) for name in BOARD_SUMMARY}
        summary["status"] = f"{t.status}: {t.statement}"
        simulated = self.spec.trainer == Trainer.SIMULATED
        tensorboard.write_refine_board(self.store.root, t.pair, rounds, summary, simulated)

    def _transition(self, step: Step) -> Transition:
        snapshot = self._snapshot()
        transition = self._estimate(step.reason, self._new_trainings(), snapshot)
        self._publish(snapshot, step.reason, final=True, transition=transition)
        self.say(f"[refine {self.grid.label}] {describe(transition)}")
        return transition


# --------------------------------------------------------------------------- what the journal says

# The value each trial is told, minimised: the point's |mean Δ| (nats), so a study's best
# trial is its point nearest the sign change. N* itself is the study attribute ``n_star``
# (an interpolation between points, never one trial). Journals written before this told the
# signed mean Δ; their earlier trials keep those values.
OBJECTIVE = "abs_mean_delta"
OBJECTIVE_NOTE = (
    "minimised: |mean Δ| (nats) of the point, so best_trial is the point nearest the sign "
    "change; N* and its interval are study attributes (n_star, n_star_low, n_star_high)"
)
# Transition fields copied to the study's user attributes (besides pair, status and final).
STUDY_ATTRS = (
    "depth_shallow",
    "depth_deep",
    "n_star",
    "n_star_low",
    "n_star_high",
    "n_star_low_68",
    "n_star_high_68",
    "sigma_ln",
    "width_deep",
    "width_deep_err",
    "rounds",
    "seeds",
    "statement",
    "simulated",
)


def objective(point: PairPoint) -> float:
    """|mean Δ| of the point; inf where no seed gave a Δ (every training failed)."""
    mean = point.decision.mean
    return abs(float(mean)) if point.n and not math.isnan(mean) else math.inf


def _number(value: float) -> float | None:
    """A finite number, else None (JSON has no NaN: optuna-dashboard could not read it)."""
    value = float(value)
    return value if math.isfinite(value) else None


def point_attrs(point: PairPoint) -> dict:
    """A trial's numeric user attributes: the point's size, Δ, se, sign and seeds."""
    decision = point.decision
    return {
        KIND_ATTR: str(point.kind),
        "n_params": _number(math.exp(point.log_n)),
        "width_deep": int(point.width_deep),
        "width_shallow": int(point.width_shallow),
        "delta": _number(decision.mean),
        "delta_se": _number(decision.se),
        "sign": decision.sign,  # +1 deeper loses, -1 deeper wins, 0 within noise
        "seeds": int(point.n),
    }


# Transition fields drawn as scalars on the pair's decisions board, at its last round.
BOARD_SUMMARY = ("n_star", "n_star_low", "n_star_high", "width_deep", "sigma_ln")


def decision_scalars(point: PairPoint) -> dict:
    """One round's point on the decisions board: Δ (nats), its se, ln N, sign and seeds."""
    decision = point.decision
    return {
        "delta": decision.mean,
        "delta_se": decision.se,
        "ln_n": point.log_n,
        "sign": decision.sign,
        "seeds": point.n,
    }


def set_study_attrs(study: optuna.Study, t: Transition, final: bool) -> None:
    """The pair's N*, status and 95% interval as study user attributes (provisional after
    each round, ``final`` when the pair is done)."""
    values = {
        "pair": t.pair,
        "status": str(t.status),
        "final": final,
        "objective": OBJECTIVE,
        "objective_note": OBJECTIVE_NOTE,
    }
    for name in STUDY_ATTRS:
        value = getattr(t, name)
        values[name] = _number(value) if isinstance(value, float) else value
    values["crossings"] = [_number(c) for c in t.crossings]
    for key, value in values.items():
        study.set_user_attr(key, value)


def describe(t: Transition) -> str:
    """One line: status and the pair's decided statement, then what it cost."""
    cost = f"{t.trials} new training(s), {t.rounds} round(s), up to {t.seeds} seed(s)"
    failures = f", failed trainings {t.failures_deep}/{t.failures_shallow} (deeper/shallower)"
    cost += failures if t.failures_deep or t.failures_shallow else ""
    unstable = t.unstable_deep + t.unstable_shallow
    cost += f", {unstable} of them unstable" if unstable else ""
    noise = f"noise {t.noise_source} ({t.noise_dof:g} dof from the seeds)"
    detail = ""
    if t.status == vocabulary.TransitionStatus.BRACKETED:
        detail = (
            f" 68% [{t.n_star_low_68:.4g}, {t.n_star_high_68:.4g}], σ(ln N*) = "
            f"{t.sigma_ln:.3f}, dx* = {t.width_deep:.1f} ± {t.width_deep_err:.1f}."
        )
    hint = HINTS.get(t.status, "") if t.status != vocabulary.TransitionStatus.BRACKETED else ""
    return f"{t.status}: {t.statement}{detail} {hint}({t.reason}; {cost}; {noise})"


HINTS = {
    TransitionStatus.CENSORED_LOW: "To bracket N*, lower space.budgets' minimum. ",
    TransitionStatus.CENSORED_HIGH: "To bracket N*, raise space.budgets' maximum. ",
    TransitionStatus.UNDECIDED: "More seeds (refine.max_seeds) or sizes further from N* decide "
    "the signs within noise. ",
    TransitionStatus.NON_MONOTONE: "",
}


# --------------------------------------------------------------------------- the stage


def grid_pairs(
    spec: ExperimentSpec,
    design: RefineDesign,
    records: Sequence[TrialRecord],
    pairs: Sequence[tuple[int, int]] | None = None,
    law: DepthWidthLaw | None = None,
    earlier: Mapping[int, Collection[float]] | None = None,
) -> list[PairGrid]:
    """The first points of a wave's ``pairs`` (default: the first wave's, placed by
    fit.reference; ``earlier``: each depth's first sizes in the waves before); InputError for a
    depth the grid never finished."""
    seeds, convention = spec.space.seeds, spec.model.size_convention
    pairs = design.waves()[0] if pairs is None else pairs
    earlier = earlier or {}
    # a search trial trains the cell's shape at reduced fidelity: never a grid point
    records = [r for r in records if r.stage != Stage.LR_SEARCH]
    grids = []
    for pair in pairs:
        budgets = design.pair_budgets(pair, law)  # the pair's first points
        # its shallower net's size trend
        trend_budgets = design.shallow_budgets(pair, law, earlier.get(pair[0], ()))
        grid = grid_pair(records, pair, budgets, seeds, convention, trend_budgets)
        decided = decide_points(grid.points, spec.refine)
        grids.append(dataclasses.replace(grid, points=tuple(decided)))
    return grids


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
        grids = grid_pairs(self.spec, self.design, records, wave, law, self._sizes)
        refiners = [
            PairRefiner(self.spec, self.store, grid, self.say, self.design) for grid in grids
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
            by_label = {refiner.grid.label: refiner for refiner in refiners}

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
) -> list[Transition]:
    """Refine every configured pair (or resume); ``run_trials`` trains batches of requests.

    ``progress``: a :class:`dwtune.study.progress.StudyProgress` (lines go to its ``note``), any
    callable taking one line, or None.
    """
    return RefineStage(spec, store, progress, rate_for).run(run_trials)


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
