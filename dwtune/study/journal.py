"""The refine stage's Optuna storage: one JournalStorage file for the experiment
(``refine/optuna.journal``), one study per depth pair in it named after the pair (``6-12``), so
``optuna-dashboard refine/optuna.journal`` shows every pair. An experiment written before keeps
a pair's study in ``refine/<Ls>-<Ld>.journal`` (study ``refine-<Ls>-<Ld>``): that pair resumes
there, so its finished trials are never retrained.

Every journal file is checked before use: a torn last line (a kill or a full disk mid-append) is
cut off with a message; other damage is refused with the exact fix
(:mod:`dwtune.storage.loaders`); trials a killed driver left running are marked failed so Optuna
asks them again.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

import optuna
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState

from dwtune.core.errors import InputError
from dwtune.core.refine.points import PairPoint
from dwtune.core.vocabulary import JOURNAL_SUFFIX, REFINE_DIR, REFINE_JOURNAL
from dwtune.storage import loaders
from dwtune.storage.store import ExperimentStore
from dwtune.study.background import Background

POINT_ATTR = "point"  # trial user attribute: the PairPoint it produced
LEGACY_PREFIX = "refine-"  # a per-pair journal's study name: refine-<Ls>-<Ld>

Pair = tuple[int, int]
Say = Callable[[str], None]  # where a repair (a cut-off line, a removed lock) is told
# Optuna's replay of a file raises these on damage check_journal lets through: a garbled line
# ValueError (JSONDecodeError, UnicodeDecodeError), a line missing a key KeyError or TypeError,
# an operation Optuna cannot replay (an unknown op_code) AttributeError or AssertionError.
REPLAY_ERRORS = (ValueError, KeyError, TypeError, AttributeError, AssertionError)


def trial_points(study: optuna.Study) -> list[PairPoint]:
    """The points of the study's finished trials, in the order they were told."""
    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return [PairPoint.from_dict(t.user_attrs[POINT_ATTR]) for t in finished]


def trial_numbers(study: optuna.Study) -> list[tuple[int, PairPoint]]:
    """(Optuna trial number, point) of the study's finished trials, in the order told."""
    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return [(t.number, PairPoint.from_dict(t.user_attrs[POINT_ATTR])) for t in finished]


def journal_path(store: ExperimentStore) -> Path:
    """The experiment's one refine journal (every pair's study)."""
    return Path(store.root) / REFINE_DIR / REFINE_JOURNAL


def legacy_path(store: ExperimentStore, pair: Pair) -> Path:
    """Where an experiment written before kept the pair's study (one journal per pair)."""
    return Path(store.root) / REFINE_DIR / f"{pair[0]}-{pair[1]}{JOURNAL_SUFFIX}"


@dataclasses.dataclass(frozen=True)
class StudyPlace:
    """The journal file holding a pair's study, and the study's name in it."""

    path: Path
    name: str
    legacy: bool  # a per-pair journal of an experiment written before


def study_place(store: ExperimentStore, pair: Pair) -> StudyPlace:
    """The pair's per-pair journal where one exists (the pair goes on there), else the
    experiment's one journal."""
    old = legacy_path(store, pair)
    if old.exists() or old.is_symlink():
        return StudyPlace(old, f"{LEGACY_PREFIX}{pair[0]}-{pair[1]}", legacy=True)
    return StudyPlace(journal_path(store), f"{pair[0]}-{pair[1]}", legacy=False)


def study_path(store: ExperimentStore, pair: Pair) -> Path:
    """The journal file holding the pair's study."""
    return study_place(store, pair).path


def open_journal(path: Path, say: Say) -> optuna.storages.JournalStorage:
    """The one opener of a refine journal file: checked, a killed driver's lock removed, then
    Optuna's storage on it. Once per file and stage: removing the lock assumes no writer, and
    the stage's pairs share the storage (it serialises their writes with a thread lock)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    loaders.check_journal(path, say)  # a torn last line is cut off, other damage refused
    loaders.clear_stale_journal_lock(path, say)
    try:
        backend = JournalFileBackend(str(path))
        return optuna.storages.JournalStorage(backend)  # replays the file
    except REPLAY_ERRORS as exc:
        raise corrupt(path, exc) from None


def corrupt(path: Path, exc: BaseException) -> InputError:
    return InputError(
        f"{path}: corrupt Optuna journal ({type(exc).__name__}); {loaders.journal_advice(path)}"
    )


class Journals:
    """The refine stage's storages: the experiment's one journal, opened on the first pair
    that lives there, and any per-pair journal of an experiment written before."""

    def __init__(self, store: ExperimentStore, say: Say | None = None):
        self.store = store
        self.say = say or (lambda line: print(line, file=sys.stderr))
        self._open: dict[Path, optuna.storages.JournalStorage] = {}

    def storage(self, path: Path) -> optuna.storages.JournalStorage:
        if path not in self._open:
            self._open[path] = open_journal(path, self.say)
        return self._open[path]

    def study(self, pair: Pair, sampler: optuna.samplers.BaseSampler | None) -> optuna.Study:
        """Create or load the pair's study; a corrupt journal is an InputError naming the fix."""
        place = study_place(self.store, pair)
        storage = self.storage(place.path)
        try:
            study = optuna.create_study(
                storage=storage,
                study_name=place.name,
                sampler=sampler,
                direction="minimize",
                load_if_exists=True,
            )
        except REPLAY_ERRORS as exc:
            raise corrupt(place.path, exc) from None
        _check_points(place, study)
        return study

    def publish(self, write: Callable[[], None], background: Background | None) -> None:
        """Run ``write`` (a pair's study attributes and decisions board, for whoever watches
        the journal or TensorBoard): on ``background`` when the stage has one, else now."""
        if background is None:
            write()
        else:
            background.submit(write)


class ScratchJournals(Journals):
    """Studies held in memory, for a stage nobody watches or resumes (the cost estimate's
    simulated twin, :mod:`dwtune.study.cost_estimate`): no journal file is written or fsynced,
    and nothing is published (:meth:`publish`). Its decisions are the same: a pair reads only
    its own study and records."""

    def study(self, pair: Pair, sampler: optuna.samplers.BaseSampler | None) -> optuna.Study:
        return optuna.create_study(
            storage=optuna.storages.InMemoryStorage(),
            study_name=f"{pair[0]}-{pair[1]}",
            sampler=sampler,
            direction="minimize",
        )

    def publish(self, write: Callable[[], None], background: Background | None) -> None:
        """Nothing: no one reads a scratch stage's attributes or board."""


def open_study(
    store: ExperimentStore,
    pair: Pair,
    sampler: optuna.samplers.BaseSampler | None,
    say: Say | None = None,
) -> optuna.Study:
    """The pair's study on storages of its own (a caller outside a refine stage)."""
    return Journals(store, say).study(pair, sampler)


def _check_points(place: StudyPlace, study: optuna.Study) -> None:
    """Every finished trial of the pair's study must hold a readable refine point."""
    path = place.path
    unreadable = [
        t.number for t in _finished(study) if not isinstance(t.user_attrs.get(POINT_ATTR), dict)
    ]
    if unreadable:
        raise InputError(
            f"{path}: study {place.name}'s trial(s) {unreadable} hold no refine point (not "
            f"written by dwtune's refine stage?); restore the journal, or "
            f"{loaders.journal_advice(path)}"
        )
    try:
        trial_points(study)
    except (ValueError, KeyError, TypeError) as exc:  # a point mapping lacking or garbling a field
        raise InputError(
            f"{path}: corrupt refine point in study {place.name} ({type(exc).__name__}); "
            f"{loaders.journal_advice(path)}"
        ) from None


def _finished(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def clear_stale_trials(study: optuna.Study) -> int:
    """Fail trials a killed driver left waiting or running; they are asked again."""
    stale = 0
    while study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        study.tell(study.ask(), state=TrialState.FAIL)
        stale += 1
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(trial.number, state=TrialState.FAIL)
        stale += 1
    return stale


# --------------------------------------------------------------------------- one pair
