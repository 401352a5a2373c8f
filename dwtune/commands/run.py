"""dwtune run SPEC: grid stage on Ray Tune, then refine, export and report.

Results are written to ``<storage>/<spec name>/`` as each trial finishes; running the same
command again (after Ctrl-C, a killed driver, or with depths or budgets added) trains only
what is missing.
"""

from __future__ import annotations

import argparse
import json
import sys

from dwtune.commands import argtypes
from dwtune.core import vocabulary
from dwtune.core.vocabulary import TRANSITIONS_FILE

DEFAULT_STORAGE = "experiments"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    argtypes.add_spec(parser, "experiment spec, e.g. search_spaces/quickstart.yaml")
    parser.add_argument(
        "--storage",
        default=DEFAULT_STORAGE,
        help="experiment root (default ./experiments); on a cluster a filesystem every node "
        "mounts at the same path (EFS, NFS)",
    )
    parser.add_argument(
        "--address",
        default=None,
        help="join this Ray cluster (HOST:PORT or 'auto'; default $RAY_ADDRESS, else start a "
        "local Ray instance sized to this machine)",
    )
    parser.add_argument(
        "--grid-only", action="store_true", help="run the grid stage only (no refine, no report)"
    )
    parser.add_argument(
        "--log-to",
        action="append",
        default=[],
        metavar="TRACKER",
        help="also log every trial, the refine decisions and the fit to an experiment tracker "
        "through Ray Tune's callbacks: wandb or mlflow (repeat the flag or give a comma list; "
        "adds to the spec's trackers.log_to); needs the extra: pip install 'dwtune[wandb]'. "
        "W&B honours WANDB_MODE=offline and WANDB_DIR (default: the experiment folder); MLflow "
        "logs to $MLFLOW_TRACKING_URI, else a file store in <experiment>/mlruns",
    )
    argtypes.add_runner(parser)
    argtypes.add_verbosity(parser)
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the answer (pairs, fit, report path) as one JSON object",
    )


def answer_lines(results) -> list[str]:
    """The study's answer in a few lines: each pair's decided statement first, then the fit
    and where the report is."""
    fit = results.fit
    tag = f" ({vocabulary.SIMULATED_LABEL})" if fit.get(vocabulary.SIMULATED_COLUMN) else ""
    table = results.root / TRANSITIONS_FILE  # absent when the spec configures no pair
    rows = results.transitions.itertuples() if table.is_file() else ()
    pairs = [f"pair {r.pair}{tag}: {r.statement}" for r in rows if getattr(r, "statement", "")]
    if fit.get("status") == vocabulary.FitStatus.FITTED:
        lines = [
            f"fit{tag}: ln dx* = {fit['a']:.3f}(±{fit['se_a']:.3f}) + "
            f"{fit['b']:.4f}(±{fit['se_b']:.4f})·L from {fit['n_points']} transitions, "
            f"R²={fit['r2']:.3f}, χ²_red={fit['chi2_red']:.2f}"
        ]
    else:
        lines = [f"fit{tag}: {fit.get('status')}: {fit.get('reason', 'see the report')}"]
    return [*pairs, *lines, f"report: {results.report}"]


def _summary(store) -> str:
    records = store.records()
    failed = [r for r in records if r.status == vocabulary.STATUS_FAILED]
    line = f"{store.root}: {len(records)} trial(s) recorded"
    return line + (f", {len(failed)} failed (rerun to retry them)" if failed else "")


def _check_scale(spec) -> None:
    """Refuse, before anything starts: a missing corpus, too many epochs, a trial that fits its
    share of a GPU at no micro-batch (dwtune.study.planning.refusals; `dwtune plan` exits 3)."""
    from dwtune.study.planning import check_packing, check_scale

    check_scale(spec)
    check_packing(spec)


def _interrupted(store) -> int:
    print(
        f"\ndwtune run: interrupted; {_summary(store)}; rerun the same command to "
        f"resume (finished trials are not trained again)",
        file=sys.stderr,
    )
    return 130


def run(args: argparse.Namespace) -> int:
    from dwtune.study.interruption import catching_ctrl_c, interrupted
    from dwtune.study.pipeline import Study, storage_root
    from dwtune.study.progress import StudyProgress, logging_to
    from dwtune.study.trackers import parse_log_to

    log_to = parse_log_to(args.log_to)  # a misspelt tracker: one line, before the spec is read
    study = Study.from_yaml(args.spec, overrides=args.overrides)
    _check_scale(study.spec)
    storage = storage_root(args.storage)  # a URL is refused before anything starts
    progress = StudyProgress(verbosity=args.verbosity)
    with catching_ctrl_c(), logging_to(progress, args.verbosity):
        try:
            results = study.run(
                storage, args.address, args.grid_only, progress, args.runner, log_to
            )
        except KeyboardInterrupt:
            return _interrupted(study.store)
    if interrupted():  # swallowed below us, or it came as the study ended: still 130
        return _interrupted(study.store)
    progress.note(_summary(study.store))
    if args.json:
        print(json.dumps(answer_dict(study.store, results, args.grid_only), indent=2), flush=True)
    elif not args.grid_only:  # the results: stdout, after the progress display (stderr) ends
        print("\n".join(answer_lines(results)), flush=True)
    return 0


def answer_dict(store, results, grid_only: bool) -> dict:
    """``run --json``: the experiment, its trial counts, and (unless grid only) each pair's
    transition (``pairs``, as ``analyze --json``), the fit (as fit.json) and the report's path."""
    from dwtune.study.api import table_records

    records = store.records()
    out: dict = {
        "experiment": str(results.root),
        "trials": len(records),
        "failed": sum(r.status == vocabulary.STATUS_FAILED for r in records),
    }
    if grid_only:
        return out
    table = results.root / TRANSITIONS_FILE  # absent when the spec configures no pair
    pairs = table_records(results.transitions) if table.is_file() else []
    return out | {"pairs": pairs, "fit": results.fit, "report": str(results.report)}
