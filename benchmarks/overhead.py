"""The platform's own overhead: a whole study's wall time against the time its trials train.

Runs one study (``Study.run``) in a fresh experiment folder and prints, per stage, the wall time,
the summed trial time (each record's ``wall_time_s``), the slots (trials the machine runs at
once: CPUs ÷ ``resources.cpu``, capped by ``resources.max_concurrent``) and

    overhead = wall − trial time / slots          mean concurrency = trial time / wall

Stages are cut by the trials' own start and finish events, whatever the runner and the display:

- ``start-up``: from the call until the first trial starts (spec checks, Ray, Tune);
- ``grid`` / ``refine`` (and ``lr_search``, ``length_check`` where a spec has them): from the
  end of the stage before (or the first trial's start) until the stage's last trial finishes;
- ``finish``: from the last trial's end until the study returns (export, fit, report).

Run (simulated: its trials are real trainings of the simulated surface, their timings real)::

    python benchmarks/overhead.py search_spaces/simulated.yaml [KEY=VALUE ...] [--runner local]

Nothing here asserts a time; the numbers it printed are quoted in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

from dwtune.core.vocabulary import Trainer
from dwtune.study.pipeline import Study

STARTUP, FINISH = "start-up", "finish"


class EventLog:
    """Forwards every call to the study's display and notes when each trial starts and ends."""

    def __init__(self, inner):
        self._inner = inner
        self.events: list[tuple[float, str, str, str]] = []  # (t, started|finished, stage, id)

    def trial_started(self, request, *args, **kwargs):
        self.events.append((time.monotonic(), "started", str(request.stage), request.trial_id))
        return self._inner.trial_started(request, *args, **kwargs)

    def trial_finished(self, request, *args, **kwargs):
        self.events.append((time.monotonic(), "finished", str(request.stage), request.trial_id))
        return self._inner.trial_finished(request, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def slots(spec, runner: str) -> int:
    if runner == "local":
        return 1
    share = spec.resources.cpu or 1.0
    count = max(math.floor((os.cpu_count() or 1) / share + 1e-9), 1)
    cap = spec.resources.max_concurrent
    return min(count, cap) if cap else count


def stage_rows(events, records, start: float, end: float, n_slots: int) -> list[dict]:
    """One row per stage (see the module doc), then the whole study."""
    trial_s: dict[str, float] = {}
    for record in records:
        trial_s[str(record.stage)] = trial_s.get(str(record.stage), 0.0) + record.wall_time_s
    order: list[str] = []
    last_end: dict[str, float] = {}
    for t, kind, stage, _ in events:
        if stage not in order:
            order.append(stage)
        if kind == "finished":
            last_end[stage] = max(last_end.get(stage, t), t)
    first_start = min((t for t, kind, *_ in events if kind == "started"), default=end)
    windows = [(STARTUP, start, first_start)]
    edge = first_start
    for stage in order:
        stop = last_end.get(stage, edge)
        windows.append((stage, edge, max(stop, edge)))
        edge = max(stop, edge)
    windows.append((FINISH, edge, end))
    rows = []
    for name, a, b in windows:
        trained = trial_s.get(name, 0.0)
        rows.append(_row(name, b - a, trained, n_slots))
    rows.append(_row("study", end - start, sum(trial_s.values()), n_slots))
    return rows


def _row(name: str, wall: float, trained: float, n_slots: int) -> dict:
    return {
        "stage": name,
        "wall_s": wall,
        "trial_s": trained,
        "slots": n_slots,
        "overhead_s": wall - trained / n_slots,
        "mean_concurrency": trained / wall if wall > 0 else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE spec overrides")
    parser.add_argument("--runner", default="ray", choices=("ray", "local"))
    parser.add_argument("--storage", default=None, help="experiment root (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)

    from dwtune.study.progress import StudyProgress

    study = Study.from_yaml(args.spec, overrides=args.overrides)
    storage = Path(args.storage or tempfile.mkdtemp(prefix="dwtune-overhead-"))
    log = EventLog(StudyProgress())
    start = time.monotonic()
    results = study.run(storage, progress=log, runner=args.runner)
    end = time.monotonic()
    records = study.store.records()
    n_slots = slots(study.spec, args.runner)
    rows = stage_rows(log.events, records, start, end, n_slots)
    simulated = study.spec.trainer == Trainer.SIMULATED
    if args.json:
        print(json.dumps({"spec": args.spec, "simulated": simulated, "rows": rows}, indent=2))
        return 0
    tag = " (SIMULATED backend)" if simulated else ""
    print(f"\n{args.spec}{tag}: {len(records)} trials, runner {args.runner}, {results.root}")
    print(f"{'stage':<13}{'wall s':>9}{'trial s':>9}{'slots':>7}{'overhead s':>12}{'conc.':>7}")
    for r in rows:
        print(
            f"{r['stage']:<13}{r['wall_s']:>9.1f}{r['trial_s']:>9.1f}{r['slots']:>7d}"
            f"{r['overhead_s']:>12.1f}{r['mean_concurrency']:>7.2f}"
        )
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
