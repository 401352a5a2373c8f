"""`dwtune analyze` on tables with no replicate runs and no checkpoints: the noise it states,
the share of points it decides, the pairs' statuses and the coverage of the planted N*.

SIMULATED DATA (tests/helpers/analysis_tables.py, ``scattered_sweep``): depths 6-12-18-24
chained on the simulated surface (law ``ln dx* = 5.039 + 0.0555·L``), 13 budgets × 3 seeds, each
run at its own size (no two share one), final losses only, sd 0.002 nats per run (0.0028 per
unpaired Δ). Dip tables: 19 budgets, a second dip of 0.06 nats one e-fold below pair 12-18's
N*, which makes that pair cross three times.

    python benchmarks/scatter_noise.py [--tables 20]
"""

from __future__ import annotations

import argparse
import collections
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dwtune.backends.simulated_surface import planted_transition  # noqa: E402
from dwtune.core.analysis import analyse_pair, size_groups  # noqa: E402
from dwtune.core.analysis.table import RunTable  # noqa: E402
from dwtune.core.spec.sections import SimulatedConfig  # noqa: E402
from tests.helpers.analysis_tables import scattered_sweep  # noqa: E402

PAIRS = ((6.0, 12.0), (12.0, 18.0), (18.0, 24.0))


def table(frame) -> RunTable:
    return RunTable(
        frame.n_layer.to_numpy(float), frame.d_model.to_numpy(float),
        frame.n_params.to_numpy(float), frame.val_loss.to_numpy(float),
        np.arange(1, len(frame) + 1), seed=frame.seed.to_numpy(),
    )  # fmt: skip


def percent(hits: int, total: int) -> str:
    se = 100 * math.sqrt(hits * (total - hits) / total) / total
    return f"{100 * hits / total:.1f} ± {se:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=20)
    args = parser.parse_args()
    config = SimulatedConfig(a=5.039, b=0.0555)
    status: collections.Counter = collections.Counter()
    dips: collections.Counter = collections.Counter()
    decided, sds, methods = [], [], collections.Counter()
    n = in95 = in68 = 0
    for r in range(args.tables):
        groups = size_groups(table(scattered_sweep(rng_seed=100 + r)))
        for pair in PAIRS:
            p = analyse_pair(groups, pair, 0.25, n_boot=500, seed=r)
            status[p.status] += 1
            methods[p.noise.source] += 1
            decided.append(np.mean(np.array(p.signs) != 0))
            sds.append(float(p.noise.sd[0]))
            if p.estimate.n_star is not None:
                truth = planted_transition(config, pair[1])
                n += 1
                in95 += p.estimate.n_star_low <= truth <= p.estimate.n_star_high
                in68 += p.estimate.n_star_low_68 <= truth <= p.estimate.n_star_high_68
        dip = scattered_sweep(
            budgets=np.geomspace(1e6, 1e9, 19), dip=(1, 1.0, 0.06), rng_seed=200 + r
        )
        dips[
            str(analyse_pair(size_groups(table(dip)), PAIRS[1], 0.25, n_boot=200, seed=r).status)
        ] += 1
    print(
        f"{args.tables} tables × {len(PAIRS)} pairs: noise {dict(methods)}, sd of Δ median "
        f"{np.median(sds):.4f} ({min(sds):.4f}-{max(sds):.4f}); points decided "
        f"{100 * np.mean(decided):.1f}%; statuses {dict(status)}"
    )
    if n:
        print(f"crossing pairs {n}: 95% coverage {percent(in95, n)}, 68% {percent(in68, n)}")
    print(f"dip tables, pair 12-18: {dict(dips)}")


if __name__ == "__main__":
    main()
