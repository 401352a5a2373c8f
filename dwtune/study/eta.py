"""The study's ETA: the cost of the work left over the pace it gets done at.

Work is counted in each trial's relative cost (:func:`~dwtune.core.cost.relative_trial_cost`:
its FLOPs per token, or 1 on the simulated backend), so a study that trains its largest shapes
first does not read its first, slowest finishes as the pace of the rest. The rule:

* **speed**: cost per second of one running trial, over the recently finished trials (the last
  quarter of them, at least :data:`RECENT_TRIALS`): their cost over the seconds each ran;
* **slots**: trials running at once, averaged over the same stretch of time;
* **work left**: the cost of every planned trial not finished, less what each running one has
  done at that speed (never more than :data:`MOST_DONE` of it), plus each unfinished refine
  pair's forecast trainings still to come (dwtune.study.progress);
* **ETA** = work left / (speed × slots). Trials with no measured run time (all started and
  ended at once) fall back to the recent finishes' cost over their stretch of time.

Before a trial has finished there is no pace: the ETA is infinite. What it cannot foresee: a
pace that changes ahead (fewer refine pairs left to run side by side, a slower node joining)
and refine trainings the forecast did not count (before it arrives, the rounds each pair may
still take). Its error on ``search_spaces/simulated.yaml`` and the quickstart:
benchmarks/README.md ("The study's ETA").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# Fewest finished trials the pace is measured over (then the last quarter of them).
RECENT_TRIALS = 10
# Most of a running trial's cost counted as done: a trial past its expected time is still running.
MOST_DONE = 0.9


@dataclass
class Finish:
    """One finished trial: when, its cost, the seconds it ran (0: unknown) and the busy
    trial-seconds of the study until then."""

    time: float
    cost: float
    seconds: float
    busy: float


@dataclass
class Pace:
    """How fast a study's trials go: fed each start and finish, in monotonic seconds."""

    running: int = 0
    busy: float = 0.0  # trial-seconds spent running, summed over trials, until `last`
    last: float | None = None
    first_start: float | None = None
    finishes: list[Finish] = field(default_factory=list)

    def started(self, now: float) -> None:
        self._advance(now)
        self.running += 1
        if self.first_start is None:
            self.first_start = now

    def finished(self, now: float, cost: float, seconds: float, was_running: bool) -> None:
        self._advance(now)
        self.running -= was_running
        if self.first_start is None:
            self.first_start = now
        self.finishes.append(Finish(now, cost, max(seconds, 0.0), self.busy))

    def _advance(self, now: float) -> None:
        if self.last is not None:
            self.busy += self.running * max(now - self.last, 0.0)
        self.last = now

    def _recent(self) -> tuple[list[Finish], float, float]:
        """The recent finishes, and the time and busy trial-seconds where their stretch began."""
        count = min(max(RECENT_TRIALS, len(self.finishes) // 4), len(self.finishes))
        recent = self.finishes[-count:]
        if count < len(self.finishes):
            before = self.finishes[-count - 1]
            return recent, before.time, before.busy
        began = recent[0].time if self.first_start is None else self.first_start
        return recent, began, 0.0

    def speed(self) -> float:
        """Cost per second of one running trial (nan: no finished trial ran a measurable time)."""
        recent, _, _ = self._recent() if self.finishes else ([], 0.0, 0.0)
        timed = [f for f in recent if f.seconds > 0]
        seconds = sum(f.seconds for f in timed)
        return sum(f.cost for f in timed) / seconds if seconds > 0 else math.nan

    def throughput(self, now: float) -> float:
        """Cost finished per second at the recent pace: speed × slots, or (trials with no
        measured run time) the recent finishes' cost over their stretch of time."""
        if not self.finishes:
            return 0.0
        recent, began, busy_then = self._recent()
        span = max(now - began, 1e-9)
        busy_now = self.busy + self.running * max(now - (self.last or now), 0.0)
        speed = self.speed()
        if math.isfinite(speed) and busy_now > busy_then:
            return speed * (busy_now - busy_then) / span
        return sum(f.cost for f in recent) / span


def eta_s(work_left: float, throughput: float) -> float:
    """Seconds left: ``work_left`` over ``throughput`` (0 when no work is left, inf without a
    pace)."""
    if work_left <= 0:
        return 0.0
    return work_left / throughput if throughput > 0 else math.inf
