"""How far the study's ETA is from the time really left, at 25%, 50% and 75% of a study's
trainings.

Runs the spec as ``dwtune run`` does (Ray Tune unless ``--runner local``) in a scratch folder,
with the progress display silent, and samples at every finished trial the ETA it would show:
``forecast`` (the planner's refine estimate, corrected as pairs finish: dwtune.study.progress)
and ``rounds`` (the same display without a forecast: trials planned plus the rounds each pair
may still take, the ETA before the forecast). The time really left is measured from the sample
to the last trial's end (export, fit and report take a few seconds more). Prints one row per
quarter of the trainings finished: the ETA, the time left and the error (ETA / left - 1).

    python benchmarks/eta.py                                   # search_spaces/simulated.yaml
    python benchmarks/eta.py search_spaces/quickstart.yaml     # real training: minutes
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from dwtune.core.spec import load_spec
from dwtune.study.pipeline import Study
from dwtune.study.progress import QUIET, StudyProgress, format_duration

QUARTERS = (0.25, 0.5, 0.75)


class Recorder(StudyProgress):
    """The display, silent, keeping (time, trials done, planned, both ETAs) per finished trial."""

    def __init__(self):
        super().__init__(verbosity=QUIET)
        self.samples: list[tuple[float, int, int, float, float]] = []
        self.lefts: list[tuple[float, float, float]] = []  # (time, trials left: forecast, rounds)

    def trial_finished(self, request, record) -> None:
        super().trial_finished(request, record)
        forecast, left = self.eta_s(), self.trials_left()
        kept, self.forecasts = self.forecasts, {}
        rounds, left_rounds = self.eta_s(), self.trials_left()  # the same without the forecast
        self.forecasts = kept
        now = time.monotonic() - self.started
        self.lefts.append((now, left, left_rounds))
        self.samples.append((now, len(self.finished), len(self.planned), forecast, rounds))


def quarter_rows(recorder: Recorder) -> list[str]:
    end = recorder.samples[-1][0]
    rows = []
    for share in QUARTERS:
        t, done, planned, forecast, rounds = recorder.samples[
            round(share * len(recorder.samples)) - 1
        ]
        left = end - t
        rows.append(
            f"{share:>4.0%}  {format_duration(t):>6}  {done:>4}/{planned:<4}  "
            f"{format_duration(left):>6}  {format_duration(forecast):>6} "
            f"({forecast / left - 1:+.0%})  {format_duration(rounds):>6} ({rounds / left - 1:+.0%})"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default="search_spaces/simulated.yaml")
    parser.add_argument("--runner", choices=("ray", "local"), default="ray")
    parser.add_argument("--samples", help="write (time, trials left) per finished trial here")
    args = parser.parse_args()
    recorder = Recorder()
    with tempfile.TemporaryDirectory(prefix="dwtune-eta-") as storage:
        Study(load_spec(args.spec)).run(storage, progress=recorder, runner=args.runner)
    forecast = sum(recorder.forecasts.values())
    print(
        f"{args.spec} ({args.runner}): {len(recorder.finished)} trainings in "
        f"{format_duration(recorder.samples[-1][0])} to the last trial; the planner forecast "
        f"{forecast} refine trainings"
    )
    print("done    time  done/planned    left  ETA forecast (error)  ETA rounds (error)")
    for row in quarter_rows(recorder):
        print(row)
    if args.samples:
        Path(args.samples).write_text(json.dumps(recorder.lefts))


if __name__ == "__main__":
    main()
