"""Console progress of a whole study: one display from the first trial to the report.

The pipeline calls :meth:`StudyProgress.study` once (the spec: its name, SIMULATED or not, what
it plans), :meth:`stage` as it moves on (grid, refine, export, fit, report); runners call
:meth:`begin` / :meth:`add` for the trials they plan, ``trial_started`` / ``trial_finished`` as
Ray Tune reports and ``tick`` from their event loop; the refine stage calls :meth:`pair` after
each of a pair's rounds. On a terminal the display is a few rows redrawn in place (rich's
``Live``), each cropped to the terminal's width so that none wraps::

    dwtune SIMULATED · refine · 1:02 elapsed · ETA 0:41 · simulated
    trials 143 done / 160 planned · 4 running · 0 failed
      6-12   round 3/8  bracket ×1.21   bisect
      12-18  round 8/8  bracket ×1.04   bracketed

Lines of their own (start-up facts, each pair's decisions, failures) print above it. Elsewhere
(a log file, a pipe, ``ray job logs``) everything is plain lines: no escape codes, no carriage
returns, the status at most every ``interval_s`` seconds; the first line says SIMULATED when
the backend is simulated.

The ETA is the study's, not a batch's (:mod:`dwtune.study.eta`: the cost of the work left over
the recent pace). The refine
trainings still to come are each unfinished pair's forecast (:meth:`forecast`, the refine stage
of the spec's simulated twin, as ``dwtune plan --cost`` estimates it) less what the pair has
asked for, scaled by how the finished pairs' trainings compared with their forecast; without a
forecast, the rounds each pair may still take (at most ``refine.max_rounds``).

Verbosity: ``QUIET`` shows only warnings (failures, retries), ``NORMAL`` the display and its
lines, ``VERBOSE`` also one line per finished trial. :class:`ProgressHandler` sends the
``dwtune`` logger's records through the display, so diagnostics never tear it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

from dwtune.core import vocabulary
from dwtune.core.records import TrialRecord, TrialRequest
from dwtune.study import eta

# Seconds between status lines when the stream is not a terminal.
LOG_INTERVAL_S = 30.0
# Seconds between redraws of the display on a terminal.
TTY_INTERVAL_S = 0.5
# Characters of a failed trial's error shown on its line (the record keeps all of it).
ERROR_CHARS = 200
# Pair rows shown on a terminal; the rest are summed up in one row.
MAX_PAIR_ROWS = 8
QUIET, NORMAL, VERBOSE = 0, 1, 2

log = logging.getLogger("dwtune")


def format_duration(seconds: float) -> str:
    """``h:mm:ss`` or ``m:ss``."""
    if not math.isfinite(seconds):
        return "--"
    seconds = round(max(seconds, 0.0))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@dataclass
class PairState:
    """Where one depth pair of the refine stage stands."""

    label: str
    round: int = 0
    max_rounds: int = 0
    bracket: float = math.nan  # N_high / N_low of its bracket (nan: none yet)
    status: str = "waiting"
    done: bool = False

    def row(self) -> str:
        bracket = f"×{self.bracket:.3g}" if math.isfinite(self.bracket) else "--"
        rounds = f"{self.round}/{self.max_rounds}"
        return f"  {self.label:<7}round {rounds:<5} bracket {bracket:<8} {self.status}"

    def left(self, per_round: float) -> float:
        """Trainings this pair may still ask for (its rounds left, at most max_rounds)."""
        return 0.0 if self.done else max(self.max_rounds - self.round, 0) * per_round


class StudyProgress:
    """The study's counts, pairs and ETA, rendered to ``stream`` (default stderr)."""

    def __init__(
        self,
        stream: TextIO | None = None,
        interval_s: float | None = None,
        verbosity: int = NORMAL,
    ):
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.verbosity = verbosity
        self.interval_s = (
            interval_s
            if interval_s is not None
            else (TTY_INTERVAL_S if self.tty else LOG_INTERVAL_S)
        )
        self.title, self.name, self.simulated = "", "", False
        self.stage_name = ""
        self.best: dict[int, float] = {}  # depth -> best completed final val loss
        self.planned: dict[str, float] = {}  # trial_id -> expected cost, trials to train
        self.running: dict[str, float] = {}  # trial_id -> start time (s, monotonic)
        self.finished: set[str] = set()
        self.pace = eta.Pace()
        self.failed = 0
        self.pairs: dict[str, PairState] = {}
        self.per_round = 2.0  # trainings a refine round asks for (both depths × seeds)
        # pair -> (refine trainings the planner expects, their summed cost)
        self.forecasts: dict[str, tuple[int, float]] = {}
        self.asked: dict[str, set[str]] = {}  # pair -> refine trainings it has asked for
        self.started = time.monotonic()
        self._last_draw = 0.0
        self._live = None
        self._printed: tuple = ()
        self._opening = False  # study() called: the title awaits the display's first output

    # ------------------------------------------------------------------ the study

    def study(self, spec) -> None:
        """The study starts: its title line (SIMULATED when it is) and its refine forecast."""
        self.simulated = spec.trainer == vocabulary.Trainer.SIMULATED
        # SIMULATED leads: a long name is what the terminal's width crops, never the tag
        self.title = f"dwtune {vocabulary.SIMULATED_LABEL}" if self.simulated else "dwtune"
        self.name = spec.name
        refine = spec.refine
        self.per_round = 2.0 * max(refine.seeds, 1)
        for pair in refine.pairs:
            label = f"{pair[0]}-{pair[1]}"
            self.pairs[label] = PairState(label, max_rounds=refine.max_rounds)
        self.started = time.monotonic()
        self._opening = True

    def _open(self) -> None:
        """Show the title line (or start the live display) with the display's first output,
        not before: a study refused before it starts prints its one error line and nothing
        else (bad input is one line)."""
        if not self._opening or self.verbosity < NORMAL:
            return
        self._opening = False
        if self.tty:
            self._start_live()
        else:
            print(self._header(), file=self.stream, flush=True)

    def stage(self, name: str, message: str = "") -> None:
        """The study moves on to ``name`` (grid, refine, export, fit, report)."""
        self.stage_name = name
        if message:
            self.note(message)
        self.tick(force=True)

    def forecast(self, refine: dict[str, tuple[int, float]]) -> None:
        """The planner's estimate of each pair's refine trainings and their summed cost: the
        ETA counts them from the start instead of learning of them round by round (module
        doc)."""
        self.forecasts = dict(refine)

    def pair(self, label: str, round: int, bracket: float, status: str, done: bool = False):
        """A refine pair after a round: bisection rounds, N_high/N_low, what it does next."""
        state = self.pairs.setdefault(label, PairState(label))
        state.round, state.bracket, state.status, state.done = round, bracket, status, done
        self.tick()

    def close(self) -> None:
        """Leave the last display on the console and stop redrawing."""
        if self._live is not None:
            self._live.update(self._renderable(), refresh=True)
            self._live.stop()
            self._live = None
        elif self.verbosity >= NORMAL and self._counts() != self._printed and self.planned:
            self._line(self.status_line())

    # ------------------------------------------------------------------ lines

    def note(self, message: str) -> None:
        """A line of its own (start-up facts, each pair's decisions)."""
        if self.verbosity >= NORMAL:
            self._line(message)

    def warn(self, message: str) -> None:
        """A line shown even with --quiet (a failure, a retry)."""
        self._line(message)

    def detail(self, message: str) -> None:
        """A line shown with --verbose only (each finished trial)."""
        if self.verbosity >= VERBOSE:
            self._line(message)

    # ------------------------------------------------------------------ trials

    def begin(
        self,
        stage: str,
        requests: list[TrialRequest],
        reused: list[TrialRecord],
        costs: dict[str, float] | None = None,
    ) -> None:
        """A runner's batch: ``requests`` to train now, ``reused`` already recorded earlier."""
        for record in reused:
            self._remember(record)
        self.stage_name = stage
        if reused:
            self.note(f"[{stage}] {len(reused)} trial(s) already recorded, not trained again")
        if requests:
            self.note(f"[{stage}] training {len(requests)} trial(s)")
        self.add(requests, costs)

    def add(self, requests: list[TrialRequest], costs: dict[str, float] | None = None) -> None:
        """More trials to train (a refine pair's next point)."""
        for r in requests:
            if r.trial_id not in self.finished:
                self.planned[r.trial_id] = (costs or {}).get(r.trial_id, 1.0)
            if r.pair:
                self.asked.setdefault(r.pair, set()).add(r.trial_id)
        self.tick()

    def end(self) -> None:
        """A runner's batch is over (the display stays up for the study)."""
        self.tick(force=True)

    def trial_started(self, request: TrialRequest) -> None:
        now = time.monotonic()
        if request.trial_id not in self.running:
            self.running[request.trial_id] = now
            self.pace.started(now)
        self.planned.setdefault(request.trial_id, 1.0)
        self.tick()

    def trial_finished(self, request: TrialRequest, record: TrialRecord) -> None:
        now = time.monotonic()
        began = self.running.pop(request.trial_id, None)
        cost = self.planned.setdefault(request.trial_id, 1.0)
        if request.trial_id not in self.finished:
            seconds = now - began if began is not None else record.wall_time_s
            self.pace.finished(now, cost, seconds, was_running=began is not None)
        self.finished.add(request.trial_id)
        failed = record.status == vocabulary.STATUS_FAILED
        self.failed += failed
        self._remember(record)
        line = self._trial_line(request, record)
        if failed:
            self.warn(line)
        else:
            self.detail(line)
        self.tick(force=True)

    def tick(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.verbosity < NORMAL or (not force and now - self._last_draw < self.interval_s):
            return
        if not self.planned and self._live is None:
            return  # nothing to show before a trial is planned; the title waits with it
        self._open()
        if self._live is not None:
            self._last_draw = now
            self._live.update(self._renderable(), refresh=True)
            return
        if not self.planned or (force and not self.tty and now - self._last_draw < self.interval_s):
            return
        self._last_draw = now
        self._printed = self._counts()
        self._line(self.status_line())

    # ------------------------------------------------------------------ rendering

    def _header(self) -> str:
        stage = f" · {self.stage_name}" if self.stage_name else ""
        elapsed = format_duration(time.monotonic() - self.started)
        eta = format_duration(self.eta_s())
        name = f" · {self.name}" if self.name else ""
        return f"{self.title or 'dwtune'}{stage} · {elapsed} elapsed · ETA {eta}{name}"

    def _trials_row(self) -> str:
        done = len(self.finished)
        return (
            f"trials {done} done / {len(self.planned)} planned · {len(self.running)} running · "
            f"{self.failed} failed"
        )

    def _pair_rows(self) -> list[str]:
        states = list(self.pairs.values())
        rows = [s.row() for s in states[:MAX_PAIR_ROWS]]
        if len(states) > MAX_PAIR_ROWS:
            rest = states[MAX_PAIR_ROWS:]
            rows.append(f"  … {len(rest)} more pair(s), {sum(s.done for s in rest)} done")
        return rows

    def status_line(self) -> str:
        """The display as one plain line (logs)."""
        pairs = ", ".join(
            f"{s.label} r{s.round} {s.status}" for s in self.pairs.values() if s.round or s.done
        )
        stage = self.stage_name or "study"
        elapsed = format_duration(time.monotonic() - self.started)
        return (
            f"[{stage}] {len(self.finished)}/{len(self.planned)} trials done, "
            f"{len(self.running)} running, {self.failed} failed"
            + (f" | pairs {pairs}" if pairs else "")
            + f" | {elapsed} elapsed, ETA {format_duration(self.eta_s())}"
        )

    def rows(self) -> list[str]:
        """The display's rows on a terminal (before cropping to its width)."""
        rows = [self._header(), self._trials_row()]
        if self.stage_name not in ("", vocabulary.Stage.GRID, vocabulary.Stage.LR_SEARCH):
            rows += self._pair_rows()
        return rows

    def _renderable(self):
        from rich.text import Text

        width = self._width()
        text = Text("\n".join(_crop(row, width) for row in self.rows()), no_wrap=True)
        text.overflow = "ellipsis"
        return text

    def _width(self) -> int:
        if self._live is not None:
            return max(self._live.console.width - 1, 20)
        return shutil.get_terminal_size((80, 24)).columns - 1

    def eta_s(self) -> float:
        """Seconds the study has left (:mod:`dwtune.study.eta`); 0 when nothing is left, else
        inf before any trial finished (no pace yet)."""
        now = time.monotonic()
        speed = self.pace.speed()  # nan before a finish: nothing is credited
        work = sum(self._cost_left(t, now, speed) for t in self.planned if t not in self.finished)
        for label, state in self.pairs.items():
            if not state.done:
                work += self._refine_cost(label) * self._to_ask(label, state)
        return eta.eta_s(work, self.pace.throughput(now))

    def _cost_left(self, trial_id: str, now: float, speed: float) -> float:
        """A planned trial's cost, less what it has done if it runs (at the recent speed)."""
        cost = self.planned[trial_id]
        began = self.running.get(trial_id)
        if began is None or not math.isfinite(speed):
            return cost
        return cost - min(speed * (now - began), eta.MOST_DONE * cost)

    def _refine_cost(self, label: str) -> float:
        """The expected cost of one of the pair's refine trainings still to come: its
        forecast's average, else that of what it (or, before it asked, the study) planned."""
        count, cost = self.forecasts.get(label, (0, 0.0))
        if count:
            return cost / count
        asked = self.asked.get(label) or self.planned.keys()
        costs = [self.planned[t] for t in asked if t in self.planned]
        return sum(costs) / len(costs) if costs else 1.0

    def trials_left(self) -> float:
        """Trials planned and not finished, and the refine trainings still to come."""
        return len(self.planned) - len(self.finished) + self.refine_left()

    def refine_left(self) -> float:
        """Refine trainings the unfinished pairs have still to ask for (module doc)."""
        return sum(self._to_ask(label, s) for label, s in self.pairs.items() if not s.done)

    def _to_ask(self, label: str, state: PairState) -> float:
        if not self.forecasts:
            return state.left(self.per_round)
        asked = len(self.asked.get(label, ()))
        expected = self._forecast_scale() * self.forecasts.get(label, (0, 0.0))[0]
        # a pair past its forecast still takes a round at least: it is not done
        return expected - asked if expected > asked else self.per_round

    def _forecast_scale(self) -> float:
        """Finished pairs' refine trainings over their forecast (1 before any finished)."""
        done = [label for label, s in self.pairs.items() if s.done and self.forecasts.get(label)]
        forecast = sum(self.forecasts[label][0] for label in done)
        if not forecast:
            return 1.0
        return sum(len(self.asked.get(label, ())) for label in done) / forecast

    def _counts(self) -> tuple[int, int, int]:
        return len(self.finished), len(self.running), self.failed

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

    # ------------------------------------------------------------------ output

    def _start_live(self) -> None:
        from rich.console import Console
        from rich.live import Live

        console = Console(file=self.stream, highlight=False, soft_wrap=False)
        self._live = Live(
            self._renderable_placeholder(),
            console=console,
            auto_refresh=False,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()
        self._live.update(self._renderable(), refresh=True)

    @staticmethod
    def _renderable_placeholder():
        from rich.text import Text

        return Text("")

    def _line(self, message: str) -> None:
        self._open()
        if self._live is not None:
            from rich.text import Text

            self._live.console.print(Text(message), soft_wrap=True)
            return
        print(message, file=self.stream, flush=True)


def _crop(row: str, width: int) -> str:
    return row if len(row) <= width else row[: max(width - 1, 0)] + "…"


class ProgressHandler(logging.Handler):
    """The ``dwtune`` logger's records as lines of the display (above it on a terminal)."""

    def __init__(self, progress: StudyProgress, level: int = logging.INFO):
        super().__init__(level)
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
        except Exception:  # a bad format string: logging's own policy
            self.handleError(record)
            return
        if record.levelno >= logging.WARNING:
            self.progress.warn(message)
        else:
            self.progress._line(message)


@contextlib.contextmanager
def logging_to(progress: StudyProgress, verbosity: int) -> Iterator[ProgressHandler]:
    """Route the ``dwtune`` logger through ``progress`` for the block: warnings only with
    --quiet, info by default, debug with --verbose."""
    level = {QUIET: logging.WARNING, NORMAL: logging.INFO}.get(verbosity, logging.DEBUG)
    handler = ProgressHandler(progress, level)
    saved = log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False
    try:
        yield handler
    finally:
        log.removeHandler(handler)
        log.setLevel(saved[0])
        log.propagate = saved[1]
