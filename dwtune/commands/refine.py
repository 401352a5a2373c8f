"""dwtune refine EXPERIMENT_DIR: run or resume the refine stage of an experiment.

Reads the experiment's resolved spec (``spec.yaml``), checks every refine pair against the grid
results and the pairs' Optuna journals (bad input: one line, exit code 2, nothing touched), then
trains on Ray Tune until every pair is bracketed to ``refine.tolerance`` or stops, and writes
``transitions.parquet``. A second run resumes: finished trainings and rounds are not repeated.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path


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


def run(args: argparse.Namespace) -> int:
    from dwtune.core.errors import InputError
    from dwtune.storage.store import ExperimentStore

    root = Path(args.experiment).expanduser()
    if not root.is_dir():
        raise InputError(f"{root}: no such experiment directory; run `dwtune run SPEC` first")
    store = ExperimentStore(root)
    spec = store.load_spec()
    if not spec.refine.pairs:
        raise InputError(
            f"{store.spec_path}: refine.pairs is empty; list [shallower, deeper] "
            f"depth pairs under refine: and run `dwtune run SPEC` again"
        )
    from dwtune.study.runners.cluster_address import check_address

    check_address(args.address)  # malformed: refused even when nothing needs training
    with store.driver_lock():
        transitions = _refine(spec, store, args.address)
        _export_and_report(store)
    from dwtune.study.refine import TRANSITIONS_FILE, describe

    for transition in transitions:
        print(f"{transition.pair}: {describe(transition)}")
    print(f"wrote {store.root / TRANSITIONS_FILE}, the Parquet exports and {store.root}/report.md")
    return 0


def _export_and_report(store) -> None:
    """Keep trials.parquet and the report in step with the trainings refine just added."""
    from dwtune.outputs.report import write_report
    from dwtune.outputs.tables import export_experiment

    export_experiment(store)
    write_report(store.root)


def _refine(spec, store, address: str | None) -> list:
    from dwtune.study.progress import StudyProgress
    from dwtune.study.refine import RefineStage
    from dwtune.study.runners.ray_tune import TuneRunner

    progress = StudyProgress(stream=sys.stderr)
    stage = RefineStage(spec, store, progress)  # bad pairs and journals fail before Ray
    with contextlib.ExitStack() as stack:
        runner = _StartOnFirstBatch(
            lambda: stack.enter_context(TuneRunner(spec, store, address=address, progress=progress))
        )
        return stage.run(runner.run)


class _StartOnFirstBatch:
    """Starts Ray for the first batch only: a finished stage resumes in a second, not ten."""

    def __init__(self, start):
        self.start, self.runner = start, None

    def run(self, requests: list) -> list:
        if self.runner is None:
            self.runner = self.start()
        return self.runner.run(requests)
