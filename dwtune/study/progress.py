"""Console progress of a study: one status line, one line per finished trial.

The runner calls :meth:`StudyProgress.begin` for each batch of requests it receives, then
``trial_started`` / ``trial_finished`` as Ray Tune reports, and ``tick`` from its event loop.
The status line says what the study is doing::

    [grid] 5/8 done, 1 running, 2 pending, 0 failed | best val/loss L1 2.412, L2 2.388 |
    0:42 elapsed, ETA 0:20

On a terminal the status line is redrawn in place; elsewhere (a log file, `ray job logs`) it is
printed at most every ``interval_s`` seconds, so logs stay short.
"""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

from dwtune.core import vocabulary
from dwtune.core.records import TrialRecord, TrialRequest

# Seconds between status lines when the stream is not a terminal.
LOG_INTERVAL_S = 30.0
# Seconds between redraws of the status line on a terminal.
TTY_INTERVAL_S = 1.0
# Characters of a failed trial's error shown on its line (the record keeps all of it).
ERROR_CHARS = 200


def format_duration(seconds: float) -> str:
    """``h:mm:ss`` or ``m:ss``."""
    if not math.isfinite(seconds):
        return "--"
    seconds = round(max(seconds, 0.0))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class StudyProgress:
    """Counts and best losses of the running study, rendered to ``stream``."""

    def __init__(self, stream: TextIO | None = None, interval_s: float | None = None):
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s = (
            interval_s
            if interval_s is not None
            else (TTY_INTERVAL_S if self.tty else LOG_INTERVAL_S)
        )
        self.best: dict[int, float] = {}  # depth -> best completed final val loss
        self.stage = ""
        self.total = self.done = self.failed = 0
        self.running: dict[str, float] = {}  # trial_id -> start time (s, monotonic)
        self.costs: dict[str, float] = {}  # trial_id -> expected cost (any unit) of this batch
        self.spent_s = 0.0  # wall seconds of the trials finished in this batch
        self.spent_cost = 0.0  # their summed cost
        self.peak_running = 0
        self.started = time.monotonic()
        self._last_draw = 0.0
        self._drawn = False
        self._printed_counts: tuple = ()  # (done, running, failed) of the last line printed

    # ------------------------------------------------------------------ events

    def note(self, message: str) -> None:
        """A line of its own (start-up facts, warnings)."""
        self._clear()
        print(message, file=self.stream, flush=True)

    def begin(
        self,
        stage: str,
        requests: list[TrialRequest],
        reused: list[TrialRecord],
        costs: dict[str, float] | None = None,
    ) -> None:
        """A batch: ``requests`` to train now, ``reused`` already recorded earlier.

        ``costs`` (trial_id -> expected cost in any unit; default all equal) let the ETA
        weigh a large model more than a small one.
        """
        for record in reused:
            self._remember(record)
        self.stage, self.total, self.done, self.failed = stage, len(requests), 0, 0
        self.costs = {r.trial_id: (costs or {}).get(r.trial_id, 1.0) for r in requests}
        self.running.clear()
        self.spent_s = self.spent_cost = 0.0
        self.peak_running = 0
        self.started = time.monotonic()
        if reused:
            self.note(f"[{stage}] {len(reused)} trial(s) already recorded, not trained again")
        if requests:
            self.note(f"[{stage}] training {len(requests)} trial(s)")

    def trial_started(self, request: TrialRequest) -> None:
        self.running.setdefault(request.trial_id, time.monotonic())
        self.peak_running = max(self.peak_running, len(self.running))
        self.tick()

    def trial_finished(self, request: TrialRequest, record: TrialRecord) -> None:
        start = self.running.pop(request.trial_id, None)
        self.done += 1
        self.failed += record.status == vocabulary.STATUS_FAILED
        if start is not None:
            self.spent_s += time.monotonic() - start
            self.spent_cost += self.costs.get(request.trial_id, 1.0)
        self.costs.pop(request.trial_id, None)
        self._remember(record)
        self.note(self._trial_line(request, record))
        self.tick(force=True)

    def tick(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.total or (not force and now - self._last_draw < self.interval_s):
            return
        self._last_draw = now
        line = self.status_line()
        if self.tty:
            self.stream.write("\r\033[K" + line)
            self._drawn = True
        else:
            self.stream.write(line + "\n")
        self._printed_counts = self._counts()
        self.stream.flush()

    def end(self) -> None:
        """Leave the final status line on the console (once)."""
        if self.total and (self.tty or self._counts() != self._printed_counts):
            self._clear()
            print(self.status_line(), file=self.stream, flush=True)
        self._drawn = False

    # ------------------------------------------------------------------ rendering

    def status_line(self) -> str:
        running = len(self.running)
        pending = max(self.total - self.done - running, 0)
        elapsed = time.monotonic() - self.started
        return (
            f"[{self.stage}] {self.done}/{self.total} done, {running} running, {pending} pending, "
            f"{self.failed} failed | best {vocabulary.VAL_LOSS} {self._best_text()} | "
            f"{format_duration(elapsed)} elapsed, ETA {format_duration(self.eta_s())}"
        )

    def eta_s(self) -> float:
        """Seconds of work left over the trials run at once; inf before any trial finished.

        Work is priced at the seconds per unit of cost seen so far: the whole cost of each
        pending trial, and what a running trial's cost leaves after the time it already ran.
        """
        if self.done >= self.total:
            return 0.0
        if not self.spent_cost:
            return math.inf
        rate = self.spent_s / self.spent_cost  # seconds per unit of cost
        now = time.monotonic()
        left = sum(
            max(cost * rate - (now - self.running[trial_id]), 0.0)
            if trial_id in self.running
            else cost * rate
            for trial_id, cost in self.costs.items()
        )
        return left / max(self.peak_running, 1)

    def _counts(self) -> tuple[int, int, int]:
        return self.done, len(self.running), self.failed

    def _best_text(self) -> str:
        if not self.best:
            return "--"
        return ", ".join(f"L{depth} {loss:.3f}" for depth, loss in sorted(self.best.items()))

    def _trial_line(self, request: TrialRequest, record: TrialRecord) -> str:
        if record.completed:
            outcome = f"{vocabulary.VAL_LOSS} {record.final_val_loss:.4f}"
        elif record.error:
            outcome = f"{record.status}: {record.error[:ERROR_CHARS]}"
        else:
            outcome = record.status
        return f"  {request.name}: {outcome} ({record.wall_time_s:.1f} s on {record.node})"

    def _remember(self, record: TrialRecord) -> None:
        if record.completed and math.isfinite(record.final_val_loss):
            best = self.best.get(record.depth, math.inf)
            self.best[record.depth] = min(best, record.final_val_loss)

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write("\r\033[K")
            self._drawn = False
