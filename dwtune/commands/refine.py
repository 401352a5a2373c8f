"""dwtune refine EXPERIMENT_DIR: run or resume the refine stage of an experiment.

Reads the experiment's resolved spec (``spec.yaml``), checks every refine pair against the grid
results and the pairs' Optuna journals (bad input: one line, exit code 2, nothing touched), then
trains on Ray Tune until every pair is bracketed to ``refine.tolerance`` or stops, and writes
``transitions.parquet``. A second run resumes: finished trainings and rounds are not repeated.
"""

from __future__ import annotations

import argparse
import sys

from dwtune.commands import argtypes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "experiment",
        metavar="EXPERIMENT_DIR",
        help="experiment directory written by `dwtune run` (holds spec.yaml)",
    )
    parser.add_argument(
        "--address",
        default=None,
        help="Ray cluster to join (HOST:PORT or auto); default: a local instance",
    )
    argtypes.add_runner(parser)
    argtypes.add_verbosity(parser)
    parser.add_argument(
        "--json", action="store_true", help="print the transitions and files as one JSON object"
    )


def run(args: argparse.Namespace) -> int:
    from dwtune.core.vocabulary import REPORT_FILE, TRANSITIONS_FILE
    from dwtune.study.pipeline import Study
    from dwtune.study.progress import StudyProgress, logging_to
    from dwtune.study.refine import describe

    study = Study.open(args.experiment)
    progress = StudyProgress(stream=sys.stderr, verbosity=args.verbosity)
    with logging_to(progress, args.verbosity):
        transitions, results = study.refine(args.address, progress, args.runner)
    if args.json:
        import json

        from dwtune.study.api import table_records

        out = {
            "experiment": str(results.root),
            "transitions": table_records(results.transitions),
            "fit": results.fit,
            "report": str(results.report),
        }
        print(json.dumps(out, indent=2))
        return 0
    for transition in transitions:
        print(f"{transition.pair}: {describe(transition)}")
    print(
        f"wrote {results.root / TRANSITIONS_FILE}, the Parquet exports and "
        f"{results.root / REPORT_FILE}"
    )
    return 0
