"""How a pair stopped travels from the step policy to its transition as a field, never as
words to parse (core/refine/steps.py StopReason, transition.py capped_wide)."""

from dwtune.core import vocabulary
from dwtune.core.refine.estimate import CrossingEstimate
from dwtune.core.refine.steps import StopReason, round_cap_reason
from dwtune.core.refine.transition import capped_wide
from tests.helpers.refine_points import REFINE, next_step, point


def _wide_estimate() -> CrossingEstimate:
    """A bracketed estimate whose bracket [1e7, 2e7] is far wider than two 10% tolerances."""
    return CrossingEstimate(
        vocabulary.TransitionStatus.BRACKETED, 1.4e7, 1.39e7, 1.41e7, 1.395e7, 1.405e7, 0.005,
        (1.4e7,), vocabulary.NOISE_MEASURED, bound_low=1e7, bound_high=2e7,
    )  # fmt: skip


def test_the_step_closing_on_its_round_cap_carries_the_fact_as_a_field():
    supported = [point(14.7, 0.03), point(14.85, 0.025), point(15, 0.02), point(17, -0.02)]
    supported.append(point(17.3, -0.03))
    step = next_step(supported, REFINE, rounds=REFINE.max_rounds)
    assert step.kind == "done" and step.reason.round_capped
    assert step.reason == f"max_rounds ({REFINE.max_rounds}) reached"  # the words unchanged


def test_the_transition_reads_the_field_not_the_words():
    # the words of a capped reason without the field, and the field under other words: only
    # the field decides (a reader parsing the text would flag the first and miss the second)
    words_only = StopReason(str(round_cap_reason(5)))
    field_only = StopReason("stopped: rounds spent", round_capped=True)
    assert not capped_wide(_wide_estimate(), words_only, 0.1)
    assert capped_wide(_wide_estimate(), field_only, 0.1)
    assert not capped_wide(_wide_estimate(), "max_rounds (5) reached", 0.1)  # plain text: no fact
