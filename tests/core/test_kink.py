"""A kinked bracket says so (core/refine/kink.py, transition.py): Δ that rises against ln N
beside a bracket, where one smooth crossing falls, is flagged in the pair's reason and
statement; a straight or merely asymmetric fall is not."""

import dataclasses
import math

from dwtune.core import vocabulary
from dwtune.core.refine.kink import kinked
from dwtune.core.refine.outcome import decide_points
from dwtune.core.refine.signs import SignedPoint
from dwtune.core.refine.transition import KINKED_SENTENCE, make_transition
from tests.helpers.refine_points import REFINE, point

LAW = dataclasses.replace(REFINE, design="law", reach=0.35, tolerance=0.1, max_rounds=5)
SIZES = (15.0, 15.5, 16.0, 16.5)  # ln N; the bracket is [15.5, 16]


def signed(deltas) -> list[SignedPoint]:
    """Decided points at SIZES with the planted mean Δ (se 0.001 nats each)."""
    return [
        SignedPoint(math.exp(x), d, 0.001, 1 if d > 0 else -1)
        for x, d in zip(SIZES, deltas, strict=True)
    ]


BRACKET = (math.exp(15.5), math.exp(16.0))


def test_a_smooth_or_asymmetric_fall_is_not_kinked():
    assert not kinked(signed([0.05, 0.03, -0.02, -0.04]), *BRACKET)
    assert not kinked(signed([0.20, 0.10, -0.001, -0.002]), *BRACKET)  # steep below, flat above


def test_delta_rising_into_the_bracket_or_climbing_back_after_it_is_kinked():
    assert kinked(signed([0.01, 0.03, -0.02, -0.04]), *BRACKET)  # a dip before the crossing
    assert kinked(signed([0.05, 0.03, -0.04, -0.01]), *BRACKET)  # climbs back above it


def test_a_rise_within_noise_is_not_kinked():
    # 0.002 nats over half an e-fold: a slope of 0.004 against its se 0.0028 (under 2 se)
    assert not kinked(signed([0.028, 0.03, -0.02, -0.04]), *BRACKET)


def test_a_kinked_pair_says_so_in_its_reason_and_statement():
    def transition(deltas):
        points = [point(x, d, n=3) for x, d in zip(SIZES, deltas, strict=True)]
        decided = decide_points(points, LAW)
        return make_transition((12, 18), decided, LAW, trials=0, rounds=2, simulated=True,
                               reason="tolerance reached")  # fmt: skip

    bent = transition([0.01, 0.03, -0.02, -0.04])
    assert bent.status == vocabulary.TransitionStatus.BRACKETED
    assert "kinked" in bent.reason and bent.statement.endswith(KINKED_SENTENCE)
    assert bent.kinked and not bent.capped_wide
    smooth = transition([0.05, 0.03, -0.02, -0.04])
    assert "kinked" not in smooth.reason and KINKED_SENTENCE not in smooth.statement
    assert not smooth.kinked
