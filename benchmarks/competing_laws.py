"""How often the competing-laws comparison names the planted law (Monte Carlo; seconds).

Each simulated study has six pairs (6-12, 12-18, 18-24, 24-30, 30-36, 36-48); each pair's
ln N* estimate is the planted law's plus σ·ε (ε standard normal), all bracketed. Planted:
levine2020 (ln dx* = 5.039 + 0.0555·L) or the separable law (loss A/dx + B/L + E with
c = ln(A/B) = 3.2). Printed per planted law and σ: how many studies prefer each law, or
neither (an AICc difference under 2), by :func:`dwtune.core.fit.competing.compare_laws`.

    python benchmarks/competing_laws.py --studies 400 --sigma 0.1 0.2 0.4
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dwtune.core.fit import TransitionObservation
from dwtune.core.fit.competing import compare_laws, separable_log_width
from dwtune.core.fit.loo import LOO_BUDGETS

PAIRS = ((6, 12), (12, 18), (18, 24), (24, 30), (30, 36), (36, 48))
A, B, C = 5.039, 0.0555, 3.2


def planted_log_width(law: str, shallow: float, deep: float) -> float:
    if law == "levine2020":
        return A + B * deep
    return C + float(separable_log_width(np.array([shallow]), np.array([deep]))[0])


def study(law: str, sigma: float, rng: np.random.Generator) -> list[TransitionObservation]:
    out = []
    for shallow, deep in PAIRS:
        log_n = math.log(12.0 * deep) + 2.0 * planted_log_width(law, shallow, deep)
        estimate = log_n + sigma * rng.normal()
        out.append(TransitionObservation(f"{shallow}-{deep}", shallow, deep, "bracketed",
                                         estimate, sigma))  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=400)
    parser.add_argument("--sigma", type=float, nargs="+", default=[0.1, 0.2, 0.4])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    for law in ("levine2020", "separable"):
        for sigma in args.sigma:
            picks = Counter(
                compare_laws(study(law, sigma, rng), LOO_BUDGETS).preferred or "neither"
                for _ in range(args.studies)
            )
            shown = ", ".join(f"{name} {picks[name]}" for name in
                              ("levine2020", "separable", "neither"))  # fmt: skip
            print(f"planted {law:10s} σ(ln N*) = {sigma:g}: {shown} of {args.studies}")


if __name__ == "__main__":
    main()
