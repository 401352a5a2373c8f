"""dwtune.outputs.law_checks and pair_deltas: forms, LOO and the study bootstrap of a study dir."""

from __future__ import annotations

import math

import numpy as np

from dwtune.core.crossing import DeltaPoint, estimate_crossing
from dwtune.core.fit import TransitionObservation, fit_law
from dwtune.core.fit.bootstrap import PairPoints, observation_from_estimate
from dwtune.core.vocabulary import PAIR_DELTAS_FILE
from dwtune.outputs import law_checks
from dwtune.storage.experiment import ExperimentWriter
from dwtune.storage.store import ExperimentStore
from dwtune.storage.tables import read_pair_deltas

A, B = 5.039, 0.0555
PAIRS = ((6, 12), (12, 18), (18, 24), (24, 30), (30, 36), (36, 48))


def _study(rng) -> list[PairPoints]:
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


def test_pair_deltas_round_trip(tmp_path):
    pairs = _study(np.random.default_rng(1))
    ExperimentWriter(ExperimentStore(tmp_path), None).pair_deltas(pairs, simulated=True)
    back = read_pair_deltas(tmp_path / PAIR_DELTAS_FILE)
    assert [p.label for p in back] == [p.label for p in pairs]
    assert back[2].points[4].deltas == pairs[2].points[4].deltas
    assert back[2].points[4].seeds == (0, 1, 2, 3)


def _observations(pairs) -> list[TransitionObservation]:
    return [observation_from_estimate(p, estimate_crossing(p.points), p.points) for p in pairs]


def test_law_checks_record_has_forms_loo_and_a_bootstrap(tmp_path):
    pairs = _study(np.random.default_rng(2))
    ExperimentWriter(ExperimentStore(tmp_path), None).pair_deltas(pairs, simulated=True)
    checks = law_checks.law_checks(tmp_path, _observations(pairs), [1e13], replicates=100)
    record = checks.record
    assert [f["form"] for f in record["forms"]["forms"]] == ["linear", "quadratic", "power"]
    assert record["forms"]["best_bic"] == "linear"  # the planted law is linear in L
    assert [r["pair"] for r in record["leave_one_pair_out"]] == [p.label for p in pairs]
    boot = record["bootstrap"]
    assert boot["status"] == "done" and boot["replicates"] == 100
    fitted = fit_law(_observations(pairs))
    assert boot["b"]["low"] < fitted.b < boot["b"]["high"]  # around the study's own estimate
    assert 0 < boot["sd_b"] < 0.01
    assert [p["budget"] for p in boot["projections"]] == [1.75e11, 1e12, 1e13]
    assert record["bootstrap_with_points"]["replicates"] == 50  # the sensitivity check
    text = "\n".join(law_checks.markdown(record))
    assert "LR test, quadratic vs linear" in text and "without" not in text
    assert "| pair left out |" in text and "Study bootstrap (" in text


def test_without_pair_deltas_the_bootstrap_says_why(tmp_path):
    pairs = _study(np.random.default_rng(3))
    record = law_checks.law_checks(tmp_path, _observations(pairs)).record
    assert record["bootstrap"]["status"] == "not run"
    assert "no pair_deltas.parquet" in record["bootstrap"]["reason"]
    assert "Study bootstrap: not run (no pair_deltas.parquet" in "\n".join(
        law_checks.markdown(record)
    )
