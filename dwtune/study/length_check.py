"""The length-check stage: each bracketed pair's N* re-estimated at other training lengths.

Runs after the refine stage when ``refine.length_check`` lists factors (the rules and the
columns: :mod:`dwtune.core.length_check`). For every bracketed pair and factor ``f`` the points
near the bracket are retrained at ``f`` times the training length with the seeds they had
(requests of stage ``length_check`` whose identity holds the scaled length, so a rerun reuses
every one of them), both depths at each point, all pairs and factors in one batch of
``run_trials``; N* is then estimated from those points alone. Writes
``length_check.parquet`` (one row per pair and factor) and prints one line per row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dwtune.core.length_check import LengthShift, check_points, describe, length_shift
from dwtune.core.records import SPEC_RATE, TrialRecord, TrialRequest, make_request
from dwtune.core.refine.estimate import estimate_crossing
from dwtune.core.refine.first_points import shallow_trend
from dwtune.core.refine.outcome import decide_points
from dwtune.core.refine.points import PairPoint, make_point, mark_unstable
from dwtune.core.refine.signs import noise_prior, sign_rule
from dwtune.core.refine.transition import Transition
from dwtune.core.spec import ExperimentSpec
from dwtune.core.vocabulary import Stage, TransitionStatus
from dwtune.storage.experiment import ExperimentWriter
from dwtune.storage.store import ExperimentStore
from dwtune.study.refine import PairRefiner, RefineStage
from dwtune.study.runners.base import reusable_record

RunTrials = Callable[[list[TrialRequest]], list[TrialRecord]]


@dataclass(frozen=True)
class PairCheck:
    """One pair at one factor: its transition, the points to retrain and their requests."""

    refiner: PairRefiner
    transition: Transition
    factor: float
    points: tuple[PairPoint, ...]
    # per point: (deeper, shallower) request per seed
    requests: tuple[dict[int, tuple[TrialRequest, TrialRequest]], ...]

    def all_requests(self) -> list[TrialRequest]:
        return [r for per_seed in self.requests for pair in per_seed.values() for r in pair]


def _request(spec: ExperimentSpec, refiner: PairRefiner, cell, seed: int, factor: float, kind: str):
    """A length-check training: the refine stage's rate for the cell, the length scaled; it
    carries the pair and the kind of the point it retrains."""
    rate_for = refiner.rate_for
    lr, source = rate_for(cell) if rate_for else SPEC_RATE
    return make_request(
        spec,
        cell,
        seed,
        Stage.LENGTH_CHECK,
        lr=lr,
        lr_source=source,
        length_factor=factor,
        pair=refiner.start.label,
        point_kind=kind,
    )


def plan_check(spec: ExperimentSpec, refiner: PairRefiner, t: Transition, factor: float):
    """The pair's check at ``factor``: its points near the bracket, both depths × their seeds."""
    points = decide_points(refiner.points_of(refiner.study), spec.refine)
    chosen = check_points(points, spec.space.budgets, spec.refine.max_seeds)
    shallow, deep = refiner.pair
    requests = []
    for point in chosen:
        cells = (spec.cell(deep, point.budget), spec.cell(shallow, point.budget))
        seeds = refiner.seed_order[: max(point.requested, point.n)]
        requests.append(
            {
                seed: tuple(_request(spec, refiner, c, seed, factor, point.kind) for c in cells)
                for seed in seeds
            }
        )
    return PairCheck(refiner, t, factor, tuple(chosen), tuple(requests))


def train_all(
    store: ExperimentStore, checks: Sequence[PairCheck], run_trials: RunTrials
) -> dict[str, TrialRecord]:
    """Records of every check's requests by trial id; ``run_trials`` is called (once, with
    each distinct request) only when some of them still need training."""
    unique = {r.trial_id: r for check in checks for r in check.all_requests()}
    if all(reusable_record(store, r, set()) is not None for r in unique.values()):
        return {i: store.read_record(i) for i in unique}
    records = run_trials(list(unique.values()))
    return {r.trial_id: record for r, record in zip(unique.values(), records, strict=True)}


def checked_points(spec: ExperimentSpec, check: PairCheck, records: dict) -> list[PairPoint]:
    """The check's points from its records, Δ at equal N along the shallower net's own size
    trend at this length (from the checked shallower trainings)."""
    convention = spec.model.size_convention
    tables = [
        {seed: (records[d.trial_id], records[s.trial_id]) for seed, (d, s) in per_seed.items()}
        for per_seed in check.requests
    ]
    shallow_table = {
        p.budget: {seed: pair[1] for seed, pair in table.items()}
        for p, table in zip(check.points, tables, strict=True)
    }
    trend = shallow_trend(shallow_table, convention)
    made = []
    for point, table in zip(check.points, tables, strict=True):
        deep = {seed: pair[0] for seed, pair in table.items()}
        shallow = {seed: pair[1] for seed, pair in table.items()}
        sizes = (point.log_n, point.width_deep, point.width_shallow)
        made.append(
            make_point(
                point.budget, sizes, deep, shallow, trend, point.kind, len(table), convention
            )
        )
    return made


def evaluate(spec: ExperimentSpec, check: PairCheck, records: dict) -> LengthShift:
    """N* from the check's points alone (the refine stage's noise prior and sign rule), and
    its row."""
    points = mark_unstable(checked_points(spec, check, records))
    estimate = estimate_crossing(
        [p.delta_point() for p in points if p.n],
        prior=noise_prior(spec.refine),
        rule=sign_rule(spec.refine),
    )
    trials = sum(records[r.trial_id].stage == Stage.LENGTH_CHECK for r in check.all_requests())
    return length_shift(check.transition, check.factor, estimate, points, trials)


def run_length_check(
    spec: ExperimentSpec,
    store: ExperimentStore,
    stage: RefineStage,
    transitions: Sequence[Transition],
    run_trials: RunTrials,
    say: Callable[[str], None] = lambda _line: None,
) -> list[LengthShift]:
    """Check every bracketed pair at every factor of refine.length_check; write the table."""
    factors = spec.refine.length_check
    if not factors:
        return []
    checks = []
    for refiner, t in zip(stage.refiners, transitions, strict=True):
        if t.status != TransitionStatus.BRACKETED:
            say(f"[length_check {t.pair}] skipped: {t.status}, no N* to check")
            continue
        checks += [plan_check(spec, refiner, t, f) for f in factors]
    checks = [c for c in checks if c.points]
    records = train_all(store, checks, run_trials) if checks else {}
    rows = [evaluate(spec, check, records) for check in checks]
    for row in rows:
        say(describe(row))
    ExperimentWriter(store, spec.to_dict()).length_check(rows)
    return rows
