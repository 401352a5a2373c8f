"""dwtune.core.fit.checks: forms, leave-one-pair-out and the study bootstrap of a study's fit."""

from __future__ import annotations

import numpy as np

from dwtune.core.fit import fit_law
from dwtune.core.fit.checks import law_checks
from tests.helpers.paired_deltas import observations_of, paired_study


def test_law_checks_record_has_forms_loo_and_a_bootstrap():
    pairs = paired_study(np.random.default_rng(2))
    record = law_checks(observations_of(pairs), pairs, [1e13], replicates=100)
    assert [f["form"] for f in record["forms"]["forms"]] == ["linear", "quadratic", "power"]
    assert record["forms"]["best_bic"] == "linear"  # the planted law is linear in L
    assert [r["pair"] for r in record["leave_one_pair_out"]] == [p.label for p in pairs]
    boot = record["bootstrap"]
    assert boot["status"] == "done" and boot["replicates"] == 100
    fitted = fit_law(observations_of(pairs))
    assert boot["b"]["low"] < fitted.b < boot["b"]["high"]  # around the study's own estimate
    assert 0 < boot["sd_b"] < 0.01
    assert [p["budget"] for p in boot["projections"]] == [1.75e11, 1e12, 1e13]
    assert record["bootstrap_with_points"]["replicates"] == 50  # the sensitivity check


def test_without_pair_deltas_the_bootstrap_says_why():
    pairs = paired_study(np.random.default_rng(3))
    record = law_checks(observations_of(pairs), None, missing="no pair_deltas.parquet (why)")
    assert record["bootstrap"] == {"status": "not run", "reason": "no pair_deltas.parquet (why)"}
    assert record["bootstrap_with_points"]["status"] == "not run"
