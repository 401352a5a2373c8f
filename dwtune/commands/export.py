"""dwtune export EXPERIMENT_DIR: write trials.parquet and curves.parquet from the records.

``dwtune run`` writes both at the end of every run; this rebuilds them at any time (after an
interrupted run, or to replace a damaged file). The trial records stay the source of truth.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment", help="experiment directory, e.g. experiments/quickstart")


def run(args: argparse.Namespace) -> int:
    from dwtune.outputs.tables import export_experiment
    from dwtune.storage.store import ExperimentStore

    store = ExperimentStore(args.experiment)
    store.load_spec_dict()  # refuse a directory that is not an experiment, before writing
    trials_path, curves_path = export_experiment(store)
    records = store.records()
    points = sum(len(r.curve) for r in records)
    print(f"wrote {trials_path} ({len(records)} trials) and {curves_path} ({points} points)")
    return 0
