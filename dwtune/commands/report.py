"""dwtune report: write report.md, figures, fit.json, projections.parquet and tb/fit."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("exp_dir", metavar="EXPERIMENT_DIR", help="experiment directory")


def run(args: argparse.Namespace) -> int:
    from dwtune.outputs.report import write_report

    _rebuild_unreadable_exports(args.exp_dir)
    files = write_report(args.exp_dir)
    print(f"report: {files.report}")
    for path in (files.fit_json, files.projections, *files.figures):
        print(f"  {path}")
    if files.tensorboard is not None:
        print(f"  {files.tensorboard} (tensorboard --logdir {files.tensorboard})")
    return 0


def _rebuild_unreadable_exports(exp_dir: str) -> None:
    """A damaged trials/curves.parquet is rebuilt from the records before the report reads it."""
    from dwtune.commands.export import say_rebuilt, unreadable_exports
    from dwtune.core.errors import InputError
    from dwtune.outputs.tables import export_experiment
    from dwtune.storage.store import ExperimentStore

    store = ExperimentStore(exp_dir)
    if store.spec_path.exists() or store.spec_path.is_symlink():
        store.load_spec_dict()  # a damaged spec.yaml is one line, not a report without it
    figures = store.root / "figures"
    if figures.exists() and not figures.is_dir():
        raise InputError(
            f"{figures}: not a folder; remove that file (report rewrites its figures there)"
        )
    unreadable = unreadable_exports(store) if store.spec_path.is_file() else {}
    if unreadable:
        export_experiment(store)
        say_rebuilt(unreadable)
