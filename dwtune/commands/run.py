"""dwtune run SPEC: grid stage on Ray Tune, then refine, export and report.

Results are written to ``<storage>/<spec name>/`` as each trial finishes; running the same
command again (after Ctrl-C, a killed driver, or with depths or budgets added) trains only
what is missing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dwtune.core import vocabulary
from dwtune.core.errors import InputError

DEFAULT_STORAGE = "experiments"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="experiment spec, e.g. search_spaces/quickstart.yaml")
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


def storage_root(storage: str) -> Path:
    """The experiment root as an absolute path (trials and Tune change working dirs)."""
    if "://" in storage:
        raise InputError(
            f"--storage: got {storage!r}; expected a filesystem path (dwtune keeps its records "
            f"as files); on a cluster mount shared storage (EFS, NFS) on every node and pass "
            f"its path"
        )
    return Path(storage).expanduser().resolve()


def _refine(spec, store, runner, progress) -> None:
    if not spec.refine.pairs:
        return
    from dwtune.study.refine import run_refine

    run_refine(spec, store, runner.run, progress=progress)


def answer_lines(files) -> list[str]:
    """The study's answer in a few lines: transitions, fit, where the report is."""
    import json

    fit = json.loads(files.fit_json.read_text())
    tag = " (SIMULATED)" if fit.get("simulated") else ""
    if fit.get("status") == "fitted":
        lines = [
            f"fit{tag}: ln dx* = {fit['a']:.3f}(±{fit['se_a']:.3f}) + "
            f"{fit['b']:.4f}(±{fit['se_b']:.4f})·L from {fit['n_points']} transitions, "
            f"R²={fit['r2']:.3f}, χ²_red={fit['chi2_red']:.2f}"
        ]
    else:
        lines = [f"fit{tag}: {fit.get('status')}: {fit.get('reason', 'see the report')}"]
    return [*lines, f"report: {files.report}"]


def _study(args: argparse.Namespace, spec, store, progress) -> None:
    from dwtune.core.records import grid_requests
    from dwtune.outputs.tables import export_experiment
    from dwtune.study.runners.ray_tune import TuneRunner

    with TuneRunner(spec, store, address=args.address, progress=progress) as runner:
        runner.run(grid_requests(spec))
        if not args.grid_only:
            _refine(spec, store, runner, progress)
    trials_path, curves_path = export_experiment(store)
    progress.note(f"wrote {trials_path} and {curves_path}")
    if not args.grid_only:
        from dwtune.outputs.report import write_report

        for line in answer_lines(write_report(store.root)):
            progress.note(line)


def _summary(store) -> str:
    records = store.records()
    failed = [r for r in records if r.status == vocabulary.STATUS_FAILED]
    line = f"{store.root}: {len(records)} trial(s) recorded"
    return line + (f", {len(failed)} failed (rerun to retry them)" if failed else "")


def run(args: argparse.Namespace) -> int:
    from dwtune.core.spec import load_spec
    from dwtune.storage.store import ExperimentStore
    from dwtune.study.progress import StudyProgress
    from dwtune.study.runners.cluster_address import check_address

    check_address(args.address)
    spec = load_spec(args.spec)
    store = ExperimentStore.for_spec(storage_root(args.storage), spec)
    progress = StudyProgress()
    # Lock first: a refused second driver must not touch the running experiment's spec.yaml.
    with store.driver_lock():
        store.initialise(spec)
        store.records()  # a corrupt record stops us here, before Ray starts
        try:
            _study(args, spec, store, progress)
        except KeyboardInterrupt:
            print(
                f"\ndwtune run: interrupted; {_summary(store)}; rerun the same command to "
                f"resume (finished trials are not trained again)",
                file=sys.stderr,
            )
            return 130
    progress.note(_summary(store))
    return 0
