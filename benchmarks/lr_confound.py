"""The learning-rate confound on the simulated surface, in-process (no Ray, no ASHA).

    python benchmarks/lr_confound.py search_spaces/simulated_lr_shared.yaml \
        search_spaces/simulated_lr_search.yaml search_spaces/simulated_lr_mup.yaml

Runs each spec's study through dwtune's own stages (per-cell Optuna search when train.lr is a
search, grid, refine, export, fit and report) with every trial trained in this process, and
prints the fitted b with its 95% interval against the planted one. SIMULATED: a rehearsal of
the statistics, not a measurement of models. In-process, no ASHA stops a search trial early:
every proposed rate trains its full search steps (``dwtune run`` adds the early stopping).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dwtune.backends.trial import run_trial_inprocess
from dwtune.core.records import grid_requests
from dwtune.core.spec import load_spec
from dwtune.outputs.report import write_report
from dwtune.storage.experiment import export_experiment
from dwtune.storage.store import ExperimentStore
from dwtune.study.lr_search import RateBook
from dwtune.study.refine import run_refine

STORAGE = Path("experiments")
Z95 = 1.96


def study(path: str) -> dict:
    spec = load_spec(path)
    store = ExperimentStore.for_spec(STORAGE.resolve(), spec)
    store.initialise(spec)

    def run(requests):
        records = []
        for request in requests:
            record = store.read_record(request.trial_id)
            if record is None:
                record = run_trial_inprocess(spec, request)
                store.write_record(record)
            records.append(record)
        return records

    book = RateBook(spec, store, run) if spec.train.lr_search else None
    rates = book.search_grid(spec.grid()) if book else None
    run(grid_requests(spec, rates))
    run_refine(spec, store, run, rate_for=book.rate_for if book else None)
    export_experiment(store)
    return json.loads(write_report(store.root).fit_json.read_text())


def main(paths: list[str]) -> None:
    for path in paths:
        fit = study(path)
        planted = load_spec(path).simulated.b
        if fit.get("status") != "fitted":
            print(f"{path}: {fit.get('status')}: {fit.get('reason')}")
            continue
        low, high = fit["b"] - Z95 * fit["se_b"], fit["b"] + Z95 * fit["se_b"]
        inside = "inside" if low <= planted <= high else "OUTSIDE"
        print(
            f"{path} (SIMULATED): b = {fit['b']:.4f} ± {fit['se_b']:.4f} "
            f"(95% [{low:.4f}, {high:.4f}]), a = {fit['a']:.3f}, {fit['n_points']} transitions; "
            f"planted b {planted} {inside}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
