"""On the driver: the Tune callback that writes each trial's record the moment it ends (so a
killed driver loses nothing finished). The function each trial runs is :mod:`.trial`'s.

A fused trial (several seeds of one training, :mod:`dwtune.study.fusion`) is one Tune trial
whose reports carry each seed's own report (:data:`.trial.MEMBERS_KEY`): the callback keeps
one state per seed and handles each seed's report as that seed's own trial's, so every seed
is recorded, shown and resumed exactly as a trial of its own; Tune's events for the trial
(start, retry, end, error) apply to every seed it carries.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import time

from ray import tune

from dwtune.core import vocabulary
from dwtune.core.records import TrialRequest, record_from_result
from dwtune.core.spec import ExperimentSpec
from dwtune.outputs import tensorboard
from dwtune.storage.store import ExperimentStore, write_failure, writing
from dwtune.study.background import Background
from dwtune.study.interruption import raise_if_interrupted
from dwtune.study.progress import StudyProgress
from dwtune.study.runners.ray_tune.checkpoints import remove_train_dir
from dwtune.study.runners.ray_tune.trial import (
    ATTEMPT_S_KEY,
    CURVE_KEYS,
    FINAL_KEY,
    MEMBERS_KEY,
    NODE_KEY,
    RECORD_KEYS,
    RESUMED_CURVE_KEY,
    RESUMED_KEY,
    STARTED_KEY,
)
from dwtune.study.runners.ray_tune.trial_errors import (
    console_text,
    error_text,
    forget_pickled_error,
    out_of_space,
)

# --------------------------------------------------------------------------- driver callback


@dataclasses.dataclass
class _TrialState:
    request: TrialRequest
    points: dict[int, dict] = dataclasses.field(default_factory=dict)  # step -> curve point
    final: dict = dataclasses.field(default_factory=dict)
    node: str = ""
    attempt_s: float = 0.0
    attempt_started: float = 0.0  # driver clock (monotonic s) when this attempt started
    earlier_attempts_s: float = 0.0  # seconds spent in attempts that failed and were retried
    attempt: int = 1
    announce_resume: bool = False  # say where a retried attempt picks up, at its first report
    recorded: bool = False  # its record is written (a feed's trial: at its final report)
    writer: object = None
    writer_path: str = ""  # the live TensorBoard folder, named when a write there fails
    checkpoint_path: str = ""  # its latest checkpoint in storage (the one a retry resumes from)
    resumed_from_step: int = 0  # the largest step an attempt resumed from (0: none did)

    @property
    def curve(self) -> list[dict]:
        return [self.points[step] for step in sorted(self.points)]

    @property
    def wall_time_s(self) -> float:
        return self.earlier_attempts_s + self.attempt_s

    def failed_attempt_s(self) -> float:
        """Seconds of an attempt that just failed: it ran past its last report until it died."""
        since_start = time.monotonic() - self.attempt_started if self.attempt_started else 0.0
        return max(self.attempt_s, since_start)


class RecordingCallback(tune.Callback):
    """Writes each trial's record (and its TensorBoard run) on the driver as it finishes."""

    def __init__(
        self,
        spec: ExperimentSpec,
        store: ExperimentStore,
        requests: dict[str, TrialRequest],
        progress: StudyProgress | None,
        tensorboard: bool,
        stopped_early: bool = False,
        on_record=None,
        fused: dict[str, list[TrialRequest]] | None = None,
    ):
        self.spec, self.store, self.requests = spec, store, requests
        # a fused trial's id (its first seed's) -> the trial ids of every seed it carries
        self.members = {lead: [r.trial_id for r in group] for lead, group in (fused or {}).items()}
        self.lead_of = {i: lead for lead, ids in self.members.items() for i in ids}
        self.progress, self.tensorboard = progress, tensorboard
        # under a stopping scheduler (the lr search's ASHA) a trial that ends without its final
        # report after reporting a curve was stopped there: early_stopped, not failed
        self.stopped_early = stopped_early
        self.states: dict[str, _TrialState] = {}
        # told (request, record) after each record is written and shown (a feed's runner)
        self.on_record = on_record
        # TensorBoard events and stale checkpoints: off the event loop (study.background)
        self.background = Background("dwtune-boards")

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks into the experiment dir for Tuner.restore, which dwtune
        # never uses; the console (pytest's capture, a notebook's stream) need not pickle.
        return self.__dict__ | {
            "progress": None,
            "states": {},
            "on_record": None,
            "background": None,
        }

    def add_fused(self, group: list[TrialRequest]) -> None:
        """A fused trial formed as its seeds are handed out (a feed's)."""
        ids = [r.trial_id for r in group]
        self.members[ids[0]] = ids
        self.lead_of.update({i: ids[0] for i in ids})

    def _state(self, trial) -> _TrialState:
        return self._state_of(trial.config["trial_id"])

    def _states(self, trial) -> list[_TrialState]:
        """The state of every seed the trial carries (one, unless it is fused)."""
        trial_id = trial.config["trial_id"]
        return [self._state_of(i) for i in self.members.get(trial_id, [trial_id])]

    def _state_of(self, trial_id: str) -> _TrialState:
        if trial_id not in self.states:
            state = self.states[trial_id] = _TrialState(self.requests[trial_id])
            if self.tensorboard:  # a live view; rewritten from the record at the end
                simulated = self.spec.trainer == vocabulary.Trainer.SIMULATED
                request = state.request
                path = tensorboard.run_dir(
                    self.store.root, request.name, simulated, request.stage, request.pair
                )
                state.writer_path = str(path)
                self.background.submit(lambda: _open_board(state, path, simulated))
        return self.states[trial_id]

    def on_trial_start(self, iteration, trials, trial, **info):
        for state in self._states(trial):
            state.attempt_started = time.monotonic()
            if self.progress:
                self.progress.trial_started(state.request)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if MEMBERS_KEY in result:  # a fused trial: each seed's report as its own trial's
            for trial_id, own in json.loads(result[MEMBERS_KEY]).items():
                self._on_result(self._state_of(trial_id), own)
            return
        self._on_result(self._state(trial), result)

    def _on_result(self, state: _TrialState, result: dict) -> None:
        state.node = result.get(NODE_KEY, state.node)
        state.attempt_s = float(result.get(ATTEMPT_S_KEY, state.attempt_s))
        if result.get(FINAL_KEY):
            state.final = dict(result)
            if vocabulary.STEP in result:  # a resumed final checkpoint reports nothing else
                point = {k: v for k, v in result.items() if k in CURVE_KEYS or k in RECORD_KEYS}
                state.points.setdefault(int(result[vocabulary.STEP]), point)
            if self.on_record is not None and not state.recorded:
                # A feed's trial is recorded at its final report, before Tune stops it: the
                # pair's next point is then queued while this trial's worker is still up, and
                # Tune hands that worker on (reuse_actors) instead of starting a new one.
                status = state.final.get(vocabulary.STATUS, vocabulary.STATUS_FINISHED)
                self._finish(state, status, "")
            return
        if result.get(STARTED_KEY):
            self._resumed(state, result)
            return
        point = {k: v for k, v in result.items() if k in CURVE_KEYS or k in RECORD_KEYS}
        if state.announce_resume:
            state.announce_resume = False
            self._note(
                f"  {state.request.name}: attempt {state.attempt} reports from "
                f"{vocabulary.STEP} {point.get(vocabulary.STEP)}"
            )
        # A retried attempt re-reports steps after its checkpoint: the latest report wins.
        state.points[int(point.get(vocabulary.STEP, len(state.points)))] = point
        if self.tensorboard:
            self.background.submit(lambda: _add_to_board(state, point))

    def _resumed(self, state: _TrialState, result: dict) -> None:
        """An attempt that resumes from a checkpoint: keep the step, and the curve up to it
        (points an earlier driver took before it was stopped; this driver's own win)."""
        step = int(result.get(RESUMED_KEY) or 0)
        if step <= 0:
            return
        state.resumed_from_step = max(state.resumed_from_step, step)
        for point in result.get(RESUMED_CURVE_KEY) or ():
            state.points.setdefault(int(point.get(vocabulary.STEP, 0)), dict(point))
        if state.attempt == 1:  # a retry's own line says where it reports from
            self._note(f"  {state.request.name}: resumes from {vocabulary.STEP} {step}")

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        """Keep a trial's latest checkpoint only (the one a retry resumes from). Tune would
        keep one itself (``num_to_keep=1``), but then snapshots the whole experiment's state
        at every checkpoint, which grows with the trials of a run (a refine stage's hundreds)."""
        state = self._state(trial)
        previous, state.checkpoint_path = state.checkpoint_path, str(checkpoint.path)
        if previous and previous != state.checkpoint_path:  # no retry resumes from it now
            self.background.submit(lambda: shutil.rmtree(previous, ignore_errors=True))

    def on_trial_recover(self, iteration, trials, trial, **info):
        for state in self._states(trial):
            if state.recorded:  # a fused seed that ended before the attempt failed
                continue
            state.earlier_attempts_s += state.failed_attempt_s()
            state.attempt_s = 0.0
            state.attempt_started = time.monotonic()
            state.attempt += 1
            state.announce_resume = True
            self._note(
                f"  {state.request.name}: attempt {state.attempt - 1} failed "
                f"({console_text(error_text(trial))}); retrying"
            )
        forget_pickled_error(trial)

    def on_trial_complete(self, iteration, trials, trial, **info):
        for state in self._states(trial):
            self._complete(state)

    def _complete(self, state: _TrialState) -> None:
        if state.recorded:
            return
        if not state.final and self.stopped_early and state.points:
            self._finish(state, vocabulary.STATUS_EARLY_STOPPED, "")
            return
        if not state.final:
            self._finish(state, vocabulary.STATUS_FAILED, "the trial ended without a final result")
            return
        self._finish(state, state.final.get(vocabulary.STATUS, vocabulary.STATUS_FINISHED), "")

    def on_trial_error(self, iteration, trials, trial, **info):
        states = [s for s in self._states(trial) if not s.recorded]
        error = error_text(trial)  # (a recorded seed failed after its final report)
        forget_pickled_error(trial)
        if not states:
            return
        full = out_of_space(error)
        if full is not None:  # the disk failed, not the trial: unrecorded, a rerun trains it
            raise write_failure(self.store.root / vocabulary.RAY_DIR, full)
        for state in states:
            state.attempt_s = state.failed_attempt_s()
            self._finish(state, vocabulary.STATUS_FAILED, error)

    def on_step_end(self, iteration, trials, **info):
        raise_if_interrupted()  # a Ctrl-C that Ray or Tune swallowed stops the study here
        if self.progress:
            self.progress.tick()

    def _note(self, message: str) -> None:
        """A retry: shown even with --quiet."""
        if self.progress:
            getattr(self.progress, "warn", self.progress.note)(message)

    def _finish(self, state: _TrialState, status: str, error: str) -> None:
        record = record_from_result(
            state.request,
            self.spec,
            state.curve,
            status,
            state.wall_time_s,
            node=state.node,
            error=error,
            resumed_from_step=state.resumed_from_step,
        )
        self.store.write_record(record)  # first: the result is safe before anything else
        state.recorded = True
        if status != vocabulary.STATUS_FAILED:  # a failed one is retried from them later
            self._drop_checkpoints(state.request.trial_id)
        if self.tensorboard:
            self.background.submit(lambda: _rewrite_board(self.store.root, state, record))
        if self.progress:
            self.progress.trial_finished(state.request, record)
        if self.on_record is not None:
            self.on_record(state.request, record)

    def _drop_checkpoints(self, trial_id: str) -> None:
        """Remove a recorded trial's checkpoint folder; a fused trial's (its first seed's)
        once every seed it carries is recorded with a final status."""
        lead = self.lead_of.get(trial_id, trial_id)
        ids = self.members.get(lead, [lead])
        states = [self.states.get(i) for i in ids]
        if not all(s is not None and s.recorded for s in states):
            return
        root = self.store.root
        self.background.submit(lambda: remove_train_dir(root, lead))

    def finish_writes(self) -> None:
        """Wait for the queued TensorBoard and checkpoint writes; raise the first that failed
        (a full disk: one InputError line)."""
        self.background.drain()

    def discard_boards(self) -> None:
        """End the writes and close every live TensorBoard file, quietly: called as a batch
        ends, when a write error may have stopped it (what was shown live is rewritten from
        the records; a failure was raised by :meth:`finish_writes` or stops the run anyway)."""
        with contextlib.suppress(Exception):
            self.background.close()
        for state in self.states.values():
            if state.writer is not None:
                state.writer.discard()


# --------------------------------------------------------------------------- board writes
# Run on the callback's background thread, in the order the events came (study.background).


def _open_board(state: _TrialState, path, simulated: bool) -> None:
    shutil.rmtree(path, ignore_errors=True)  # left by an interrupted driver
    with writing(path):
        state.writer = tensorboard.open_writer(path, simulated)


def _add_to_board(state: _TrialState, point: dict) -> None:
    if state.writer is None:
        return
    with writing(state.writer_path):
        tensorboard.add_point(state.writer, point)
        state.writer.flush()  # the live view shows each report as it comes


def _rewrite_board(root, state: _TrialState, record) -> None:
    if state.writer is None:
        return
    with writing(state.writer_path):
        state.writer.close()
        tensorboard.write_trial_board(root, state.request.name, record)
