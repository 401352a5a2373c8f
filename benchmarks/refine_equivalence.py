"""A canonical record of what the refine stage does, to compare two versions of the code.

    python benchmarks/refine_equivalence.py OUT.json [--cases simulated:grid ...]

Runs whole studies in process (grid and refine stages, no Ray) on the simulated backend:
``simulated.yaml``, ``simulated_hard.yaml`` (its shipped surface and three others) and
paper.yaml's simulated twin (the overrides of benchmarks/README.md), each under the grid and
the law design (``refine.design``). Writes one JSON document: per case, every trial identity
trained (sorted), each pair's transition row (N*, intervals, status, reason, statement,
...) with floats written by ``repr`` (to the last digit), and the sizes each pair visited in
the order the refine stage trained them. Two runs of different code compare with ``cmp``;
any difference in a trained trial, a size, an N* or a decision shows as a byte.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

from dwtune.core.errors import InputError
from dwtune.core.spec import load_spec
from dwtune.storage.store import ExperimentStore
from dwtune.study.refine import refine_in_process

ROOT = Path(__file__).resolve().parents[1]
SPACES = ROOT / "search_spaces"
PAPER_TWIN = (
    "trainer=simulated",
    "data.corpus=shakespeare",
    "resources.workers_per_trial=1",
    "train.steps=2",
    "train.eval_every=1",
    "train.warmup_steps=0",
)
SPECS: dict[str, tuple[str, tuple[str, ...]]] = {
    "simulated": ("simulated.yaml", ()),
    "hard_non_monotone": ("simulated_hard.yaml", ()),
    "hard_depth_noise": ("simulated_hard.yaml", ("simulated.surface=depth_noise",)),
    "hard_outliers": ("simulated_hard.yaml", ("simulated.surface=outliers",)),
    "hard_divergences": ("simulated_hard.yaml", ("simulated.surface=divergences",)),
    "hard_asymmetric": ("simulated_hard.yaml", ("simulated.surface=asymmetric",)),
    "paper_twin": ("paper.yaml", PAPER_TWIN),
    "paper_twin_b_low": ("paper.yaml", (*PAPER_TWIN, "simulated.b=0.03885")),
}
DESIGNS = ("grid", "law")


def canonical(value):
    """Floats by repr (every digit), containers recursively; NaN and infinities by name."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


def run_case(spec_file: str, overrides: tuple[str, ...], design: str) -> dict:
    spec = load_spec(SPACES / spec_file, (*overrides, f"refine.design={design}"))
    with tempfile.TemporaryDirectory(prefix="dwtune-equivalence-") as scratch:
        store = ExperimentStore.for_spec(Path(scratch), spec)
        try:
            transitions, runner = refine_in_process(spec, store)
        except InputError as exc:  # a refusal is an outcome too (e.g. a depth all diverged)
            return {"error": str(exc), "trials": sorted(r.trial_id for r in store.records())}
        records = list(store.records())
    visited: dict[str, list] = {}
    for r in records:
        if r.stage != "refine":
            continue
        visited.setdefault(r.pair, []).append(
            [r.round, r.depth, r.width, r.budget, r.seed, r.point_kind, r.status]
        )
    return {
        "trained": runner.trained,
        "trials": sorted(r.trial_id for r in records),
        "grid_sizes": sorted({(r.depth, r.budget) for r in records if r.stage == "grid"}),
        "refine_points": {k: sorted(v, key=repr) for k, v in sorted(visited.items())},
        "transitions": [dataclasses.asdict(t) for t in transitions],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the JSON file to write")
    parser.add_argument(
        "--cases", nargs="*", default=None, help="NAME:DESIGN (default: every spec × design)"
    )
    args = parser.parse_args(argv)
    cases = args.cases or [f"{name}:{design}" for name in SPECS for design in DESIGNS]
    result = {}
    for case in cases:
        name, design = case.split(":")
        started = time.perf_counter()
        result[case] = canonical(run_case(*SPECS[name], design))
        print(f"{case}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
