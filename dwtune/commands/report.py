"""dwtune report: write report.md, figures, fit.json, projections.parquet and tb/fit."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("exp_dir", metavar="EXPERIMENT_DIR", help="experiment directory")


def run(args: argparse.Namespace) -> int:
    from dwtune.outputs.report import write_report

    files = write_report(args.exp_dir)
    print(f"report: {files.report}")
    for path in (files.fit_json, files.projections, *files.figures):
        print(f"  {path}")
    if files.tensorboard is not None:
        print(f"  {files.tensorboard} (tensorboard --logdir {files.tensorboard})")
    return 0
