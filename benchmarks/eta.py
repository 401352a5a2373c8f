"""How far the study's ETA is from the time really left, at 25%, 50% and 75% of a study's
trainings.

Runs the spec as ``dwtune run`` does (Ray Tune unless ``--runner local``) in a scratch folder,
with the progress display silent, and samples at every finished trial two ETAs side by side:
``cost`` (the display's: the cost of the work left over the recent pace; dwtune.study.eta) and
``count`` (the rule before it: the trainings left, forecast included, over the rate the last
quarter of the finished trials came at). The time really left is measured from the sample to the
last trial's end (export, fit and report take a few seconds more). Prints when the refine
forecast arrived, then one row per quarter of the trainings finished: the ETA, the time left and
the error (ETA / left - 1).

    python benchmarks/eta.py                                   # search_spaces/simulated.yaml
    python benchmarks/eta.py search_spaces/quickstart.yaml     # real training: minutes
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

from dwtune.core.spec import load_spec
from dwtune.study.pipeline import Study
from dwtune.study.progress import QUIET, StudyProgress, format_duration

QUARTERS = (0.25, 0.5, 0.75)
COUNT_RATE_TRIALS = 10  # the count rule's fewest trials (then the last quarter of them)


class Recorder(StudyProgress):
    """The display, silent, keeping (time, trials done, planned, both ETAs) per finished trial."""

    def __init__(self):
        super().__init__(verbosity=QUIET)
        self.samples: list[tuple[float, int, int, float, float]] = []
        self.details: list[tuple[float, float]] = []  # (trainings left, pace)
        self.forecast_at = math.nan  # seconds after the start the refine forecast arrived

    def trial_finished(self, request, record) -> None:
        super().trial_finished(request, record)
        now = time.monotonic() - self.started
        self.samples.append(
            (now, len(self.finished), len(self.planned), self.eta_s(), self.count_eta_s())
        )
        self.details.append((self.trials_left(), self.pace.throughput(time.monotonic())))

    def forecast(self, refine: dict[str, tuple[int, float]]) -> None:
        super().forecast(refine)
        self.forecast_at = time.monotonic() - self.started

    def count_eta_s(self) -> float:
        """The rule before the cost rule: trainings left over the last quarter's finish rate."""
        left = self.trials_left()
        if left <= 0:
            return 0.0
        times = [finish.time for finish in self.pace.finishes]
        now = time.monotonic()
        window = min(max(COUNT_RATE_TRIALS, len(times) // 4), len(times) - 1)
        if window < COUNT_RATE_TRIALS:
            began = self.pace.first_start or now
            return left / (len(times) / max(now - began, 1e-9)) if times else math.inf
        return left / (window / max(now - times[-1 - window], 1e-9))


def quarter_rows(recorder: Recorder) -> list[str]:
    end = recorder.samples[-1][0]
    rows = []
    for share in QUARTERS:
        t, done, planned, cost, count = recorder.samples[round(share * len(recorder.samples)) - 1]
        left = end - t
        rows.append(
            f"{share:>4.0%}  {format_duration(t):>6}  {done:>4}/{planned:<4}  "
            f"{format_duration(left):>6}  {format_duration(cost):>6} ({cost / left - 1:+.0%})"
            f"  {format_duration(count):>6} ({count / left - 1:+.0%})"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default="search_spaces/simulated.yaml")
    parser.add_argument("--runner", choices=("ray", "local"), default="ray")
    parser.add_argument("--samples", help="write every sample (time, done, planned, ETAs) here")
    args = parser.parse_args()
    recorder = Recorder()
    with tempfile.TemporaryDirectory(prefix="dwtune-eta-") as storage:
        Study(load_spec(args.spec)).run(storage, progress=recorder, runner=args.runner)
    forecast = sum(count for count, _ in recorder.forecasts.values())
    print(
        f"{args.spec} ({args.runner}): {len(recorder.finished)} trainings in "
        f"{format_duration(recorder.samples[-1][0])} to the last trial; the planner forecast "
        f"{forecast} refine trainings, {format_duration(recorder.forecast_at)} after the start"
    )
    print("done    time  done/planned    left  ETA cost (error)  ETA count, before (error)")
    for row in quarter_rows(recorder):
        print(row)
    if args.samples:
        Path(args.samples).write_text(json.dumps([recorder.samples, recorder.details]))


if __name__ == "__main__":
    main()
