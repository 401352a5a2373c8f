"""Where a trial's checkpoints live, so that any attempt on any node continues from the last.

Every unfinished trial has one folder on the experiment's storage,
``<experiment>/train/<trial_id>`` (:data:`~dwtune.core.vocabulary.TRAIN_DIR`), found again by
its identity whichever Tune run, driver or node runs it next:

- a one-process trial keeps its latest checkpoint there as ``state-<step>`` (copied from the
  node's scratch, then renamed into place, so a ``state-*`` folder is always complete); a
  retried attempt, or the same trial started by a new driver after the old one was killed,
  resumes from it;
- a sharded trial's Ray Train run lives there (``RunConfig(storage_path=<experiment>/train,
  name=<trial_id>)``): Ray Train restores the latest checkpoint its snapshot names.

Beside each checkpoint's files, :data:`PROGRESS_FILE` holds its step and the curve reported so
far: an attempt that resumes tells the driver where it resumed from (the record's
``resumed_from_step``) and the points an earlier driver took before it was stopped.

The folder is removed once the trial's record is written with a final status (a failed trial
keeps it: a later driver retries it from there). Scratch (a checkpoint being written, before
it is copied to storage) stays on the node: ``resources.scratch_dir``, else the system's
temporary folder. Pure standard library: the trial, the recorder and the runner share it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from dwtune.core import vocabulary

PROGRESS_FILE = "dwtune_progress.json"  # {"step": int, "curve": [point, ...]}
STATE_PREFIX = "state-"  # a one-process trial's checkpoint: state-<step, 9 digits>
STAGING_PREFIX = ".staging-"  # one being copied in (removed by the next attempt)
SCRATCH_PREFIX = "dwtune-ckpt-"  # an attempt's node-local staging: dwtune-ckpt-<owner>-<random>


def train_dir(experiment_root: str | Path, trial_id: str) -> Path:
    """The trial's checkpoint folder under the experiment's storage."""
    return Path(experiment_root) / vocabulary.TRAIN_DIR / trial_id


def scratch(scratch_dir: str | None, owner: str) -> tempfile.TemporaryDirectory:
    """A node-local folder to stage one attempt's checkpoints in (its parent created if
    missing). ``owner`` names the trial (and rank) it is for: what an earlier attempt of the
    same owner left there (a killed process never cleans up: a checkpoint's size, tens of GB
    for a large trial) is removed first; Tune never runs two attempts of a trial at once."""
    parent = Path(scratch_dir or tempfile.gettempdir()).expanduser()
    parent.mkdir(parents=True, exist_ok=True)
    prefix = f"{SCRATCH_PREFIX}{owner}-"
    for stale in parent.glob(f"{prefix}*"):
        shutil.rmtree(stale, ignore_errors=True)
    return tempfile.TemporaryDirectory(prefix=prefix, dir=str(parent))


def write_progress(directory: str | Path, step: int, curve: list[dict]) -> None:
    """Record the checkpoint's step and the curve so far beside its files."""
    path = Path(directory) / PROGRESS_FILE
    path.write_text(json.dumps({"step": int(step), "curve": curve}, default=float))


def read_progress(directory: str | Path | None) -> dict | None:
    """``{"step", "curve"}`` of the checkpoint in ``directory``; None without one."""
    if directory is None:
        return None
    try:
        raw = json.loads((Path(directory) / PROGRESS_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("step"), int):
        return None
    curve = raw.get("curve")
    return {"step": raw["step"], "curve": curve if isinstance(curve, list) else []}


def latest_state(trial_dir: Path) -> Path | None:
    """A one-process trial's latest complete checkpoint in its folder, if any."""
    if not trial_dir.is_dir():
        return None
    states = sorted(p for p in trial_dir.glob(f"{STATE_PREFIX}*") if p.is_dir())
    return states[-1] if states else None


def clear_staging(trial_dir: Path) -> None:
    """Drop copies a killed attempt left half-written."""
    for stale in trial_dir.glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)


def keep_state(source: str, trial_dir: Path, step: int, curve: list[dict]) -> Path:
    """Copy the checkpoint in ``source`` (node scratch) to ``state-<step>`` in the trial's
    folder, then drop the older ones. The copy is renamed into place once complete, so an
    attempt killed mid-copy leaves the previous checkpoint whole."""
    target = trial_dir / f"{STATE_PREFIX}{int(step):09d}"
    if not target.exists():  # a resumed final checkpoint is saved again at its step
        staging = trial_dir / f"{STAGING_PREFIX}{int(step):09d}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(source, staging)
        write_progress(staging, step, curve)
        os.replace(staging, target)
    for older in trial_dir.glob(f"{STATE_PREFIX}*"):
        if older != target:
            shutil.rmtree(older, ignore_errors=True)
    return target


def remove_train_dir(experiment_root: str | Path, trial_id: str) -> None:
    """Remove a recorded trial's checkpoints, and ``train/`` once no trial has any left."""
    folder = train_dir(experiment_root, trial_id)
    shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(OSError):  # other trials' folders are still there
        folder.parent.rmdir()


class CurveSoFar:
    """The points an attempt has reported, those of the checkpoint it resumed from first: what
    each new checkpoint's progress file carries, so a later attempt restores the whole curve."""

    def __init__(self, progress: dict | None, keys: frozenset[str]):
        self.keys = keys  # the report's keys that belong in the curve
        curve = (progress or {}).get("curve", [])
        self.points = {int(p.get(vocabulary.STEP, 0)): p for p in curve}

    def add(self, values: dict) -> int:
        """Keep a report's curve point; its step."""
        step = int(values.get(vocabulary.STEP, 0))
        self.points[step] = {k: v for k, v in values.items() if k in self.keys}
        return step

    def curve(self) -> list[dict]:
        return [self.points[step] for step in sorted(self.points)]
