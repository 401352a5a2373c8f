"""dwtune report: draw report.md, figures and tb/fit from an experiment's results.

The report only renders what the fit stage wrote (fit.json, projections.parquet). A directory
whose fit files are missing or older than its tables (written by `dwtune export`, or by a dwtune
before the fit stage existed) gets the fit stage first, said on the console.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dwtune.commands import argtypes
from dwtune.core.vocabulary import FIGURES_DIR


def add_arguments(parser: argparse.ArgumentParser) -> None:
    argtypes.completes(
        parser.add_argument("exp_dir", metavar="EXPERIMENT_DIR", help="experiment directory"),
        argtypes.DIRECTORY,
    )
    parser.add_argument("--json", action="store_true", help="print the files written as JSON")


def run(args: argparse.Namespace) -> int:
    from dwtune.outputs.report import write_report
    from dwtune.storage.experiment import ExperimentReader

    exp_dir = Path(args.exp_dir)
    _rebuild_unreadable_exports(exp_dir)
    if exp_dir.is_dir() and ExperimentReader(exp_dir).fit_is_stale():
        from dwtune.study.fit_stage import write_fit

        written = write_fit(exp_dir)
        note = f"fit stage: wrote {written.fit_json} and {written.projections}"
        print(note, file=sys.stderr if args.json else sys.stdout)
    files = write_report(exp_dir)
    if args.json:
        import json

        paths = {
            "report": files.report,
            "fit_json": files.fit_json,
            "projections": files.projections,
            "tensorboard": files.tensorboard,
        }
        out = {k: None if v is None else str(v) for k, v in paths.items()}
        print(json.dumps(out | {"figures": [str(f) for f in files.figures]}, indent=2))
        return 0
    print(f"report: {files.report}")
    for path in (files.fit_json, files.projections, *files.figures):
        print(f"  {path}")
    if files.tensorboard is not None:
        print(f"  {files.tensorboard} (tensorboard --logdir {files.tensorboard})")
    return 0


def _rebuild_unreadable_exports(exp_dir: Path) -> None:
    """A damaged trials/curves.parquet is rebuilt from the records before the report reads it."""
    from dwtune.core.errors import InputError
    from dwtune.storage.experiment import ExperimentReader, export_experiment, rebuilt_note

    reader = ExperimentReader(exp_dir)
    store = reader.store
    if exp_dir.is_dir():
        store.check_layout()  # the report writes figures/ and tb/ there: never elsewhere
    if store.spec_path.exists() or store.spec_path.is_symlink():
        store.load_spec_dict()  # a damaged spec.yaml is one line, not a report without it
    figures = store.root / FIGURES_DIR
    if figures.exists() and not figures.is_dir():
        raise InputError(
            f"{figures}: not a folder; remove that file (report rewrites its figures there)"
        )
    unreadable = reader.unreadable_exports() if store.spec_path.is_file() else {}
    if unreadable:
        export_experiment(store)
        for path, problem in unreadable.items():
            print(rebuilt_note(path, problem), file=sys.stderr)
