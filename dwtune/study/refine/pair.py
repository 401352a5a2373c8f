"""One pair's refinement: its study's loop (plan a step once, train its point with paired
seeds until the sign is decided, tell Optuna), and the pair's transition at the end."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Generator, Sequence

import optuna

from dwtune.core.budget import GridCell
from dwtune.core.fit.bootstrap import PairPoints
from dwtune.core.records import (
    SPEC_RATE,
    TrialRecord,
    TrialRequest,
    make_request,
)
from dwtune.core.refine.design import RefineDesign
from dwtune.core.refine.first_points import (
    PairStart,
    extension_budgets,
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
from dwtune.core.refine.steps import (
    Step,
    decide_seeds,
    plan_step,
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
)
from dwtune.outputs import tensorboard
from dwtune.storage.store import ExperimentStore
from dwtune.study.background import Background
from dwtune.study.journal import (
    POINT_ATTR,
    Journals,
    clear_stale_trials,
    study_path,
    trial_numbers,
    trial_points,
)
from dwtune.study.refine.attrs import (
    BOARD_SUMMARY,
    decision_scalars,
    describe,
    objective,
    point_attrs,
    set_study_attrs,
)
from dwtune.study.refine.early_calls import EarlyCalls
from dwtune.study.refine.sampler import (
    KIND_ATTR,
    LOG_N,
    PROPOSED,
    StepSampler,
    budget_span,
    cut_rounds,
)

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


SNAP_TOLERANCE = 1e-9  # a proposal this close (in ln N) to a grid budget is that budget


class PairRefiner(EarlyCalls):
    """Runs one pair's study to its end and derives the pair's transition."""

    rate_for: RateFor | None = None  # set by RefineStage when the spec searches rates
    background: Background | None = None  # set by RefineStage while its pairs refine
    # told (pair, bisection rounds, bracket N_high/N_low, status, done) as the pair moves on
    watch: Callable[..., None] | None = None

    def __init__(
        self,
        spec: ExperimentSpec,
        store: ExperimentStore,
        start: PairStart,
        say: Progress,
        design: RefineDesign,
        journals: Journals | None = None,
    ):
        """``journals``: the stage's storages, shared by its pairs (default: the pair's own)."""
        self.spec, self.store, self.start, self.say = spec, store, start, say
        self.design = design  # where the pair's next size goes (chosen once by the stage)
        self.refine = spec.refine
        self.pair = (start.depth_shallow, start.depth_deep)
        count = max(self.refine.max_seeds, len(spec.space.seeds))
        self.seed_order = seed_sequence(spec.space.seeds, count)
        self.path = study_path(store, self.pair)
        self.span = budget_span(spec)
        self.sampler = StepSampler()
        self.journals = journals or Journals(store, say)
        self.study = self.journals.study(self.pair, self.sampler)
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
            self.say(f"[refine {self.start.label}] resuming: {stale} interrupted trial(s) redone")
        missing = self._unrecorded()
        if missing:  # a removed record: its journal point stays, its training is redone
            self.say(f"[refine {self.start.label}] {len(missing)} training(s) without a record")
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
        """The pair's next step, from its first points and its study's history alone: the points
        judged once under the pair's noise, then the step policy with the stage's design."""
        points, rounds = self.points_of(self.study), cut_rounds(self.study)
        return plan_step(
            points, self.refine, rounds, self._deep_width, self.span, design=self.design
        )

    def _show(self, step: Step, status: str, done: bool = False) -> None:
        if self.watch is None:
            return
        low, high = step.outcome.low, step.outcome.high
        bracket = math.exp(high - low) if math.isfinite(low) and math.isfinite(high) else math.nan
        rounds = cut_rounds(self.study)
        self.watch(self.start.label, rounds, bracket, status, done)

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
        logs += [p.log_n for p in self.start.points]
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
        """The pair's first points and ``told`` (a later one at the same budget replacing an earlier
        one), sorted, corrected to equal N along the shallower depth's size trend extended
        by the pair's own extension points (:func:`on_extended_trend`)."""
        return self._equal_n(told)[0]

    def _equal_n(self, told: Sequence[PairPoint]) -> tuple[list[PairPoint], SizeTrend]:
        """:meth:`merged`'s points and the extended trend they are corrected along."""
        points = merge_points(self.start.points, told)
        extensions = extension_budgets(told)
        return on_extended_trend(points, self.start.trend, self._shallow_log_n, extensions)

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
            pair=self.start.label,
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
        trend = self.start.trend
        point = make_point(budget, sizes, deep, shallow, trend, kind, requested, convention)
        point = dataclasses.replace(point, verified=verified)
        if early_ends is not None:
            sign, batch, ends = early_ends  # the batch's records hold partial losses
            point = with_early_ends(point, batch, ends, sign)
        decided = decide_points(self.merged([*told, point]), self.refine)
        return next(p for p in decided if p.budget == budget)

    # ------------------------------------------------------------------ reporting

    def _announce(self, point: PairPoint, number: int) -> None:
        verdict = {1: "deeper loses", -1: "deeper wins", 0: "within noise"}[point.decision.sign]
        if not point.decision.decided and point.n < decide_seeds(self.refine):
            verdict = f"provisional ({point.n} seed(s) decide no sign)"
        self.say(
            f"[refine {self.start.label}] trial {number} ({point.kind}): N = "
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
        return PairPoints(self.start.label, self.pair[0], self.pair[1], deltas)

    def _snapshot(self) -> Snapshot:
        """The journal's told points (with their trial numbers) and bisection rounds now."""
        return trial_numbers(self.study), cut_rounds(self.study)

    def _estimate(
        self,
        reason: str,
        trials: int = 0,
        snapshot: Snapshot | None = None,
        round_capped: bool = False,
    ):
        """The pair's transition from its first and journal points as they stand (or as
        ``snapshot`` read them earlier); ``round_capped``: the pair stopped on its round cap."""
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
            round_capped=round_capped,
        )

    def _publish(
        self, snapshot: Snapshot, reason: str, final: bool, transition: Transition | None = None
    ) -> None:
        """The pair's transition (``transition``, else estimated from ``snapshot``) as study
        attributes and on its decisions board, as the stage's journals publish
        (:meth:`~dwtune.study.journal.Journals.publish`)."""

        def write() -> None:
            t = transition if transition is not None else self._estimate(reason, snapshot=snapshot)
            set_study_attrs(self.study, t, final=final)
            self._board(t, snapshot[0])

        self.journals.publish(write, self.background)

    def _board(self, t: Transition, told: list[tuple[int, PairPoint]]) -> None:
        """The pair's decisions as TensorBoard scalars (tb/refine/<pair>/decisions)."""
        rounds = [{"round": number + 1, **decision_scalars(point)} for number, point in told]
        summary = {name: getattr(t, name) for name in BOARD_SUMMARY}
        summary["status"] = f"{t.status}: {t.statement}"
        simulated = self.spec.trainer == Trainer.SIMULATED
        tensorboard.write_refine_board(self.store.root, t.pair, rounds, summary, simulated)

    def _transition(self, step: Step) -> Transition:
        snapshot = self._snapshot()
        trials = self._new_trainings()
        transition = self._estimate(step.reason, trials, snapshot, step.round_capped)
        self._publish(snapshot, step.reason, final=True, transition=transition)
        self.say(f"[refine {self.start.label}] {describe(transition)}")
        return transition
