"""Six pairs of paired Δs on a planted law, as the refine stage writes them: the study
bootstrap's input, and the observations of the fit made from them."""

from __future__ import annotations

import math

import numpy as np

from dwtune.core.fit import TransitionObservation
from dwtune.core.fit.bootstrap import PairPoints, observation_from_estimate
from dwtune.core.refine.estimate import estimate_crossing
from dwtune.core.refine.signs import DeltaPoint

A, B = 5.039, 0.0555
PAIRS = ((6, 12), (12, 18), (18, 24), (24, 30), (30, 36), (36, 48))


def paired_study(rng) -> list[PairPoints]:
    """Six pairs on the planted law, 9 sizes around each N*, 4 paired seeds, sd 0.004 nats."""
    pairs = []
    for shallow, deep in PAIRS:
        log_star = math.log(12 * deep) + 2 * (A + B * deep)
        points = tuple(
            DeltaPoint(
                math.exp(log_star + dx),
                tuple(-0.05 * math.tanh(dx / 0.5) + rng.normal(0, 0.004, 4)),
                seeds=(0, 1, 2, 3),
            )
            for dx in np.linspace(-2, 2, 9)
        )
        pairs.append(PairPoints(f"{shallow}-{deep}", shallow, deep, points))
    return pairs


def observations_of(pairs) -> list[TransitionObservation]:
    return [observation_from_estimate(p, estimate_crossing(p.points), p.points) for p in pairs]
