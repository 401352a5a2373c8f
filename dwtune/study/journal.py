"""The refine stage's Optuna journals: one JournalStorage file per depth pair, checked before use.

A torn last line (a kill or a full disk mid-append) is cut off with a message; other damage is
refused with the exact fix (:mod:`dwtune.storage.loaders`); trials a killed driver left running
are marked failed so Optuna asks them again.
"""

from __future__ import annotations

import sys
from pathlib import Path

import optuna
from optuna.trial import TrialState

from dwtune.core.errors import InputError
from dwtune.core.refine.points import PairPoint
from dwtune.core.vocabulary import JOURNAL_SUFFIX, REFINE_DIR
from dwtune.storage import loaders
from dwtune.storage.store import ExperimentStore

POINT_ATTR = "point"  # trial user attribute: the PairPoint it produced


def trial_points(study: optuna.Study) -> list[PairPoint]:
    """The points of the study's finished trials, in the order they were told."""
    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return [PairPoint.from_dict(t.user_attrs[POINT_ATTR]) for t in finished]


def trial_numbers(study: optuna.Study) -> list[tuple[int, PairPoint]]:
    """(Optuna trial number, point) of the study's finished trials, in the order told."""
    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return [(t.number, PairPoint.from_dict(t.user_attrs[POINT_ATTR])) for t in finished]


def study_path(store: ExperimentStore, pair: tuple[int, int]) -> Path:
    return store.root / REFINE_DIR / f"{pair[0]}-{pair[1]}{JOURNAL_SUFFIX}"


def open_study(path: Path, sampler: optuna.samplers.BaseSampler, say=None) -> optuna.Study:
    """Create or load the pair's study; a corrupt journal is an InputError naming the fix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    say = say or (lambda line: print(line, file=sys.stderr))
    loaders.check_journal(path, say)  # a torn last line is cut off, other damage refused
    loaders.clear_stale_journal_lock(path, say)
    try:
        backend = optuna.storages.journal.JournalFileBackend(str(path))
        storage = optuna.storages.JournalStorage(backend)
        study = optuna.create_study(
            storage=storage,
            study_name=f"refine-{path.stem}",
            sampler=sampler,
            direction="minimize",
            load_if_exists=True,
        )
    # Only Optuna's replay of the file runs in here: a garbled line raises ValueError
    # (JSONDecodeError, UnicodeDecodeError), a line missing a key KeyError or TypeError, an
    # operation Optuna cannot replay (an unknown op_code) AttributeError or AssertionError.
    except (ValueError, KeyError, TypeError, AttributeError, AssertionError) as exc:
        raise InputError(
            f"{path}: corrupt Optuna journal ({type(exc).__name__}); {loaders.journal_advice(path)}"
        ) from None
    _check_points(path, study)
    return study


def _check_points(path: Path, study: optuna.Study) -> None:
    """Every finished trial of the journal must hold a readable refine point."""
    unreadable = [
        t.number for t in _finished(study) if not isinstance(t.user_attrs.get(POINT_ATTR), dict)
    ]
    if unreadable:
        raise InputError(
            f"{path}: trial(s) {unreadable} hold no refine point (not written by dwtune's refine "
            f"stage?); restore the journal or move it aside to restart this pair's refinement"
        )
    try:
        trial_points(study)
    except (ValueError, KeyError, TypeError) as exc:  # a point mapping lacking or garbling a field
        raise InputError(
            f"{path}: corrupt refine point in the Optuna journal ({type(exc).__name__}); "
            f"{loaders.journal_advice(path)}"
        ) from None


def _finished(study: optuna.Study) -> list:
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
