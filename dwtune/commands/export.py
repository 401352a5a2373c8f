"""dwtune export EXPERIMENT_DIR: write trials.parquet and curves.parquet from the records.

``dwtune run`` writes both at the end of every run; this rebuilds them at any time (after an
interrupted run, or to replace a damaged file). The trial records stay the source of truth.
"""

from __future__ import annotations

import argparse
import sys

from dwtune.commands import argtypes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    argtypes.completes(
        parser.add_argument("experiment", help="experiment directory, e.g. experiments/quickstart"),
        argtypes.DIRECTORY,
    )
    parser.add_argument("--json", action="store_true", help="print the files written as JSON")


def run(args: argparse.Namespace) -> int:
    from dwtune.storage.experiment import ExperimentReader, export_experiment, rebuilt_note

    reader = ExperimentReader(args.experiment)
    store = reader.store
    store.load_spec_dict()  # refuse a directory that is not an experiment, before writing
    unreadable = reader.unreadable_exports()
    trials_path, curves_path = export_experiment(store)
    for path, problem in unreadable.items():
        print(rebuilt_note(path, problem), file=sys.stderr)
    records = store.records()
    points = sum(len(r.curve) for r in records)
    if args.json:
        import json

        out = {"trials": str(trials_path), "trials_count": len(records)}
        print(json.dumps(out | {"curves": str(curves_path), "curve_points": points}, indent=2))
        return 0
    print(f"wrote {trials_path} ({len(records)} trials) and {curves_path} ({points} points)")
    return 0
