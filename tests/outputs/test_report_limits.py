"""report.md's "What these results cannot show": each caveat follows the study's own design."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from dwtune.outputs.report.limits import limits_lines, limits_section
from dwtune.storage.experiment import Experiment


def trials(**columns) -> pd.DataFrame:
    base = {
        "stage": ["grid", "grid", "refine"],
        "params_non_embedding": [1e6, 1e7, 3e6],
        "lr": [3e-3, 3e-3, 3e-3],
        "lr_source": ["spec"] * 3,
        "parametrization": ["sp"] * 3,
        "compare": ["params"] * 3,
    }
    return pd.DataFrame({**base, **columns})


def transitions(*statuses: str) -> pd.DataFrame:
    return pd.DataFrame({"pair": [f"p{i}" for i in range(len(statuses))], "status": statuses})


def study(rows=None, spec=None, simulated=False, statuses=("bracketed",) * 3, length=None):
    return Experiment(
        root=Path("exp"),
        name="s",
        trials=trials() if rows is None else rows,
        transitions=transitions(*statuses),
        simulated=simulated,
        spec=spec if spec is not None else {"train": {"steps": 1500}},
        notes=(),
        length_check=length,
    )


def one(lines: list[str], words: str) -> str:
    found = [line for line in lines if words in line]
    assert len(found) == 1, (words, lines)
    return found[0]


def test_a_shared_rate_is_named_with_the_way_to_separate_it():
    line = one(limits_lines(study()), "learning rate")
    assert "every trial trained at 0.003" in line and "search" in line


def test_a_searched_rate_says_it_was_searched_on_one_seed_and_not_that_it_was_shared():
    rows = trials(lr=[1e-3, 2e-3, 1.5e-3], lr_source=["search", "search", "interpolated"])
    lines = limits_lines(study(rows))
    assert "first seed" in one(lines, "learning rate")
    assert not any("every trial trained at" in line for line in lines)


def test_the_parametrisation_and_the_comparison_axis_come_from_the_trial_rows():
    rows = trials(parametrization=["mup"] * 3, compare=["flops"] * 3)
    lines = limits_lines(study(rows))
    assert "`mup`" in one(lines, "under another parametrisation")
    assert "coordcheck" in one(lines, "learning rate")  # a shared rate is μP's design
    assert "compared at equal training FLOPs" in one(lines, "equal parameters")


@pytest.mark.parametrize(("length", "says"), [(None, "length_check"), ("checked", "checked")])
def test_training_length_points_to_the_length_check_only_when_it_is_missing(length, says):
    frame = None if length is None else pd.DataFrame({"pair": ["6-12"], "factor": [0.5]})
    line = one(limits_lines(study(length=frame)), "training length")
    assert "1,500 steps" in line and says in line


def test_too_few_bracketed_pairs_say_no_law_and_enough_say_nothing():
    few = limits_lines(study(statuses=("bracketed", "undecided", "non_monotone")))
    assert "1 pair(s) bracketed" in one(few, "needs at least 3")
    # censored pairs enter the fit's likelihood but do not make up its 3 bracketed transitions
    censored = limits_lines(study(statuses=("bracketed", "censored_high", "censored_low")))
    assert "1 pair(s) bracketed" in one(censored, "needs at least 3")
    enough = limits_lines(study(statuses=("bracketed",) * 3))
    assert not any("needs at least" in line for line in enough)
    # with a law, how its intervals learn the pairs' scale, and what they leave out
    assert "prior worth 0.25 pseudo-observations" in one(enough, "law's intervals with 3")
    assert not any("law's intervals" in line for line in few)


def test_the_scan_switched_off_is_said_and_the_simulated_trainer_is_named():
    spec = {"refine": {"scan_spacing": 0}, "data": {"corpus": "shakespeare"}}
    lines = limits_lines(study(spec=spec, simulated=True))
    assert "scan_spacing: 0" in one(lines, "second sign change")
    assert "planted surface" in one(lines, "simulated trainer")
    assert not any("shakespeare" in line for line in lines)  # it reads no corpus
    real = limits_lines(study(spec={**spec, "refine": {"scan_spacing": 0.35}}))
    assert "`shakespeare`" in one(real, "corpus")
    assert not any("second sign change" in line or "planted" in line for line in real)


def test_the_law_design_says_it_cannot_see_a_dip_away_from_each_n_star():
    law = limits_lines(study(spec={"refine": {"design": "law"}}))
    assert "bracketed, not non_monotone" in one(law, "second sign change away from each N*")
    grid = limits_lines(study(spec={"refine": {"design": "grid"}}))
    assert not any("away from each N*" in line for line in grid)


def test_the_largest_size_trained_bounds_the_extrapolation_and_the_section_has_a_heading():
    section = limits_section(study())
    assert section[0] == "## What these results cannot show"
    assert "largest 1e+07" in one(section, "extrapolation")


def test_an_epoch_guard_raised_on_purpose_is_named_as_an_overfitting_design():
    data = {"corpus": "shakespeare", "tokenizer": "char", "max_epochs": 20.0}
    line = one(limits_lines(study(spec={"train": {"steps": 5000}, "data": data})), "max_epochs")
    assert line.startswith("Capacity on fresh data: `data.max_epochs: 20`")
    assert "up to 20 times" in line and "overfitting design" in line
    guarded = {**data, "max_epochs": 4.0}
    lines = limits_lines(study(spec={"train": {"steps": 5000}, "data": guarded}))
    assert not [line for line in lines if "max_epochs" in line]
