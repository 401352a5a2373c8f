"""What the Δ figure marks for a pair the refine stage did not bracket."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from matplotlib.figure import Figure

from dwtune.outputs.report.figures import _mark_transition


def transition_row(status: str, low: float, high: float) -> pd.Series:
    return pd.Series(
        {
            "pair": "1-2",
            "status": status,
            "depth_shallow": 1,
            "depth_deep": 2,
            "n_star": math.nan,
            "n_star_low": low,
            "n_star_high": high,
            "seeds": 4,
        }
    )


@pytest.mark.parametrize(
    ("status", "low", "high", "label"),
    [
        ("undecided", 3.01e5, math.nan, "N* > 3.01e+05"),  # lost up to 3e5, then within noise
        ("undecided", math.nan, 1e6, "N* < 1e+06"),  # won from 1e6 on, within noise below
        ("censored_high", 1e5, 1e6, "N* > 1e+06"),
        ("censored_low", 1e5, 1e6, "N* < 1e+05"),
    ],
)
def test_a_bound_is_drawn_on_the_side_its_statement_gives(status, low, high, label):
    ax = Figure().subplots()
    _mark_transition(ax, transition_row(status, low, high))
    assert [line.get_label() for line in ax.get_lines()] == [label]
