"""The hook on Tune's actor reuse: a staged trial whose own actor has started keeps it."""

from __future__ import annotations

import types

import pytest
from ray.tune.execution.tune_controller import TuneController

from dwtune.study.runners.ray_tune import actor_reuse

pytestmark = pytest.mark.ray  # imports ray (starts nothing)

STARTED, REQUESTED = "started-actor", "requested-actor"


class Cache:
    """Tune's actor cache, reduced to what the reuse path asks first; records the asks."""

    def __init__(self):
        self.asked = 0

    def has_cached_object(self, resources) -> bool:
        self.asked += 1
        return False


class Trial:
    """Hashable, as Tune's trials are (they key the controller's maps)."""

    placement_group_factory = "0.5 CPU"


def _controller(own_actor: str | None, resetting: bool = False):
    trial = Trial()
    manager = types.SimpleNamespace(is_actor_started=lambda actor: actor == STARTED)
    controller = types.SimpleNamespace(
        _trial_to_actor={trial: own_actor} if own_actor else {},
        _resetting_trials={trial} if resetting else set(),
        _actor_manager=manager,
        _actor_cache=Cache(),
    )
    return controller, trial


def test_install_wraps_tunes_reuse_once():
    assert actor_reuse.install()
    hooked = TuneController._maybe_reuse_cached_actor
    assert actor_reuse.install()
    assert TuneController._maybe_reuse_cached_actor is hooked
    # one wrap: the wrapped function is Tune's own, not an earlier wrap
    assert not getattr(hooked.__wrapped__, "_dwtune_keeps_started_actor", False)


def test_a_trial_whose_actor_has_started_waits_for_it_and_leaves_the_cache_alone():
    actor_reuse.install()
    controller, trial = _controller(STARTED)
    assert TuneController._maybe_reuse_cached_actor(controller, trial) is False
    assert controller._actor_cache.asked == 0
    assert controller._trial_to_actor[trial] == STARTED


@pytest.mark.parametrize("own_actor", [REQUESTED, None])
def test_a_trial_with_only_a_requested_actor_or_none_asks_tunes_cache(own_actor):
    actor_reuse.install()
    controller, trial = _controller(own_actor)
    assert TuneController._maybe_reuse_cached_actor(controller, trial) is False
    assert controller._actor_cache.asked == 1


def test_a_trial_being_reset_onto_a_cached_actor_is_left_to_tune():
    actor_reuse.install()
    controller, trial = _controller(STARTED, resetting=True)
    assert TuneController._maybe_reuse_cached_actor(controller, trial) is True


def test_a_controller_without_the_expected_internals_gets_tunes_behaviour_and_is_counted():
    before = actor_reuse.COUNTS["fallback"]
    assert actor_reuse.own_actor_started(types.SimpleNamespace(), object()) is False
    assert actor_reuse.COUNTS["fallback"] == before + 1
