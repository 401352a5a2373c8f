"""benchmarks/study_coverage.py: realisations, one whole simulated study, its summaries."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks import study_coverage
from dwtune.core.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]

SIMULATED = ROOT / "search_spaces" / "simulated.yaml"


def test_realisations_have_their_own_seeds_and_none_is_the_spec_itself():
    spec = load_spec(SIMULATED)
    assert study_coverage.realisation(spec, None) is spec
    first, second = (study_coverage.realisation(spec, k).space.seeds for k in (0, 1))
    assert first == (1000,) and second == (1100,)
    # the refine stage counts up from the grid seeds (max_seeds 4): no realisation reuses another's
    assert max(first) + spec.refine.max_seeds < min(second)


@pytest.mark.slow  # a whole simulated study
def test_one_study_is_measured_against_its_planted_transitions_and_law():
    spec = study_coverage.realisation(load_spec(SIMULATED), 0)
    result = study_coverage.run_study(spec)
    assert [p["pair"] for p in result["pairs"]] == [
        "6-12", "12-18", "18-24", "24-30", "30-36", "36-48"
    ]  # fmt: skip
    bracketed = [p for p in result["pairs"] if "error" in p]
    assert bracketed, result
    # each N* within 0.1 e-folds of the planted one, with a positive σ
    assert all(abs(p["error"]) < 0.1 and p["sigma"] > 0 for p in bracketed)
    assert math.isfinite(result["chi2_red"]) and result["dof"] == len(bracketed) - 2
    assert result["a_covered"] in (True, False) and result["trainings"] > 100
    assert set(result["depth_covered"]) == set(spec.fit.budgets)  # 175B, 1T, 10T
    assert all(held in (True, False) for held in result["depth_covered"].values())
    assert set(result["depth_spread"]) == set(spec.fit.budgets)
    assert all(0 < spread < 1 for spread in result["depth_spread"].values())


def _study(chi2_red: float, a: bool = True, b: bool = True, depth: bool = True) -> dict:
    held = {"pairs": [], "chi2_red": chi2_red, "dof": 4, "a_covered": a, "b_covered": b}
    spread = {1.75e11: 0.1 * chi2_red, 1e12: 0.2}  # ln(high/low) of the depth's interval
    return held | {"depth_covered": {1.75e11: depth, 1e12: True}, "depth_spread": spread}


def test_the_fit_summary_counts_tail_shares_and_where_the_shipped_realisation_falls():
    results = [_study(0.5), _study(1.0, depth=False), _study(2.5, a=False), _study(4.0, b=False)]
    lines = study_coverage.fit_lines(results, _study(3.0))
    assert "mean 2.00" in lines[0] and "max 4.00" in lines[0]
    assert lines[1].endswith("share above 2.37: 0.500 (0.050)")  # 2.5 and 4.0
    assert "share above 3.32: 0.250" in lines[2]  # 4.0 only
    assert "χ²_red 3.00; realisations above it 0.250" in lines[3]
    assert "of a holds the planted a: 75.0%" in lines[4]
    assert "of b holds the planted b: 75.0%" in lines[5]
    assert "optimal depth at 1.75e+11 holds the planted one: 75.0%" in lines[6]
    assert lines[6].endswith("median ln(high/low) 0.175")  # of 0.05, 0.1, 0.25, 0.4
    assert "optimal depth at 1e+12 holds the planted one: 100.0%" in lines[7]


def test_the_pair_table_gives_each_pairs_coverage_and_median_absolute_error():
    def pair(label, error, sigma, in95):
        row = {"pair": label, "status": "bracketed", "error": error, "sigma": sigma}
        return row | {"in68": in95, "in95": in95}

    rows = [pair("6-12", 0.01, 0.01, True), pair("6-12", -0.03, 0.01, False)]
    rows += [pair("12-18", 0.002, 0.004, True), {"pair": "12-18", "status": "censored"}]
    lines = study_coverage.pair_lines([{"pairs": rows}])
    assert lines[0].split()[-2:] == ["median", "|err|"]
    first, second, every = (line.split() for line in lines[1:])
    assert first[:2] == ["6-12", "2/2"] and first[-4:] == ["50.0%", "50.0%", "0.0100", "0.0200"]
    assert second[:2] == ["12-18", "1/2"] and second[-1] == "0.0020"  # the censored one left out
    assert every[:2] == ["all", "3/4"] and every[-1] == "0.0100"  # of 0.01, 0.03, 0.002


def test_a_spec_that_trains_real_models_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as ended:
        study_coverage.main(["--spec", str(ROOT / "search_spaces" / "quickstart.yaml")])
    assert ended.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "trainer: simulated" in err
