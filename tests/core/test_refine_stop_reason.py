"""How a pair stopped travels from the step policy to its transition as a field, never as
words to parse (core/refine/steps.py Step.round_capped, transition.py capped_wide)."""

from dwtune.core.refine.steps import round_cap_reason
from dwtune.core.refine.transition import make_transition
from tests.helpers.refine_points import REFINE, next_step, point


def test_the_step_closing_on_its_round_cap_carries_the_fact_as_a_field():
    supported = [point(14.7, 0.03), point(14.85, 0.025), point(15, 0.02), point(17, -0.02)]
    supported.append(point(17.3, -0.03))
    step = next_step(supported, REFINE, rounds=REFINE.max_rounds)
    assert step.kind == "done" and step.round_capped
    assert step.reason == round_cap_reason(REFINE.max_rounds)  # the words for people
    early = next_step(supported, REFINE, rounds=0)
    assert not early.round_capped


def test_the_transition_reads_the_field_not_the_words():
    # the words of a capped reason without the field, and the field under other words: only
    # the field decides (a reader parsing the text would flag the first and miss the second)
    wide = [point(16.0, 0.05, n=3), point(17.0, -0.04, n=3)]

    def flagged(reason: str, round_capped: bool) -> bool:
        t = make_transition((12, 18), wide, REFINE, trials=0, rounds=5, simulated=True,
                            reason=reason, round_capped=round_capped)  # fmt: skip
        return t.capped_wide

    assert not flagged(round_cap_reason(5), round_capped=False)
    assert flagged("stopped: rounds spent", round_capped=True)
