"""What the refine estimate costs: the simulated twin's refine stage with its Optuna studies in a
journal file (as a study keeps them) against in memory (``ScratchJournals``, what
``plan --cost`` and the ETA's forecast use), alternating in one run.

    python benchmarks/estimate_cost.py [SPEC ...] [--repeats 2] [--json]

Per spec and storage: the refine stage's seconds (the grid's simulated trainings are excluded),
the trainings it asked for and a digest of its transitions, which must agree between the two
(the decisions are the same; only the writes differ). Prints a table (or JSON) and the median
ratio journal ÷ memory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from dwtune.core.records import grid_requests
from dwtune.core.spec import load_spec
from dwtune.storage.store import ExperimentStore
from dwtune.study.cost_estimate import simulated_twin
from dwtune.study.journal import ScratchJournals
from dwtune.study.refine import run_refine
from dwtune.study.runners.local import LocalRunner

ROOT = Path(__file__).resolve().parents[1]
SPECS = ["search_spaces/simulated.yaml", "search_spaces/quickstart.yaml"]


def refine_once(spec_path: str, in_memory: bool) -> dict:
    """The twin's refine stage once: seconds, trainings asked, transitions' digest."""
    twin = simulated_twin(load_spec(spec_path))
    grid_ids = {r.trial_id for r in grid_requests(twin)}
    asked: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="dwtune-estimate-cost-") as scratch:
        store = ExperimentStore.for_spec(scratch, twin)
        store.initialise(twin)
        runner = LocalRunner(twin, store)
        runner.run(grid_requests(twin))

        def run(requests):
            asked.update(r.trial_id for r in requests if r.trial_id not in grid_ids)
            return runner.run(requests)

        journals = ScratchJournals(store) if in_memory else None
        start = time.perf_counter()
        found = run_refine(twin, store, run, journals=journals)
        seconds = time.perf_counter() - start
    digest = hashlib.sha256(repr([(t.pair, t.status, t.n_star) for t in found]).encode())
    return {"seconds": seconds, "trainings": len(asked), "digest": digest.hexdigest()[:12]}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("specs", nargs="*", default=SPECS)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for spec in args.specs:
        runs: dict[str, list[dict]] = {"journal": [], "memory": []}
        for _ in range(args.repeats):  # alternating: both see the same load
            runs["journal"].append(refine_once(spec, in_memory=False))
            runs["memory"].append(refine_once(spec, in_memory=True))
        digests = {r["digest"] for kind in runs.values() for r in kind}
        trainings = {r["trainings"] for kind in runs.values() for r in kind}
        journal = statistics.median(r["seconds"] for r in runs["journal"])
        memory = statistics.median(r["seconds"] for r in runs["memory"])
        rows.append(
            {
                "spec": spec,
                "trainings": sorted(trainings),
                "same_decisions": len(digests) == 1 and len(trainings) == 1,
                "journal_s": journal,
                "memory_s": memory,
                "ratio": journal / memory,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print("| spec | refine trainings | same decisions | journal (s) | memory (s) | ratio |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(
                f"| {r['spec']} | {r['trainings']} | {r['same_decisions']} | "
                f"{r['journal_s']:.1f} | {r['memory_s']:.1f} | {r['ratio']:.1f}x |"
            )
    return 0 if all(r["same_decisions"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
