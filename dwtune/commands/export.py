"""dwtune export EXPERIMENT_DIR: write trials.parquet and curves.parquet from the records.

``dwtune run`` writes both at the end of every run; this rebuilds them at any time (after an
interrupted run, or to replace a damaged file). The trial records stay the source of truth.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment", help="experiment directory, e.g. experiments/quickstart")


def run(args: argparse.Namespace) -> int:
    from dwtune.storage.experiment import export_experiment
    from dwtune.storage.store import ExperimentStore

    store = ExperimentStore(args.experiment)
    store.load_spec_dict()  # refuse a directory that is not an experiment, before writing
    unreadable = unreadable_exports(store)
    trials_path, curves_path = export_experiment(store)
    say_rebuilt(unreadable)
    records = store.records()
    points = sum(len(r.curve) for r in records)
    print(f"wrote {trials_path} ({len(records)} trials) and {curves_path} ({points} points)")
    return 0


def unreadable_exports(store) -> dict:
    """Parquet exports that exist but cannot be read: path -> why. They are rebuilt from the
    records (the source of truth), and the user is told so."""
    from dwtune.core.vocabulary import CURVES_FILE, TRIALS_FILE
    from dwtune.storage.loaders import parquet_problem

    paths = [store.root / name for name in (TRIALS_FILE, CURVES_FILE)]
    return {path: problem for path in paths if (problem := parquet_problem(path))}


def say_rebuilt(unreadable: dict) -> None:
    from dwtune.core.vocabulary import TRIAL_RECORDS_DIR

    for path, problem in unreadable.items():
        print(
            f"{path}: could not be read ({problem}); rebuilt it from {TRIAL_RECORDS_DIR}/",
            file=sys.stderr,
        )
