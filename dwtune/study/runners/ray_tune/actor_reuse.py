"""A trial keeps the actor Tune started for it instead of trading it for a cached one.

With ``reuse_actors=True`` Tune stages a trial that finds no cached actor and requests a new
actor for it. If a running trial ends before that actor is ready, Tune hands the staged trial
the ended trial's cached actor and stops the new one (``TuneController.
_maybe_reuse_cached_actor``), even when the new actor's worker process is already being
created. A simulated trial lasts ~0.1 s and a new Tune trial worker ~1.5 s of CPU
(``import ray.tune`` alone is 0.7 s), so once the live actors are one fewer than the slots the
free slot is given, again and again, to a new actor that a cached one then replaces: on the
2-core machine the refine stage of ``simulated.yaml`` started ~35 such workers and ran at
half its concurrency (benchmarks/README.md).

The hook: a staged trial whose own actor has already been started waits for it (its start is
paid for) and the cached actor stays for another staged trial, so the live actors climb back
to the slots; an actor only requested (no resources yet, no process) is still traded for a
cached one, as Tune does. Tune has no public setting for this; the hook wraps one private
method and reads private attributes, each checked: a Ray whose controller lacks them gets
Tune's own behaviour (``install`` returns False, or ``COUNTS["fallback"]`` grows), which the
tests catch.
"""

from __future__ import annotations

import collections
import functools
import logging

from ray.tune.execution import tune_controller

log = logging.getLogger(__name__)

_HOOKED = "_dwtune_keeps_started_actor"
# what the hook did, per decision: "kept" (the trial waits for its started actor),
# "delegated" (Tune's own reuse), "fallback" (Tune's internals not as expected)
COUNTS: collections.Counter[str] = collections.Counter()


def install() -> bool:
    """Wrap Tune's reuse of cached actors once per process; False if Tune has no such method
    (then Tune behaves as it does without dwtune)."""
    controller = getattr(tune_controller, "TuneController", None)
    original = getattr(controller, "_maybe_reuse_cached_actor", None)
    if original is None:
        log.debug("Tune's controller has no _maybe_reuse_cached_actor: actor reuse as Tune's")
        return False
    if getattr(original, _HOOKED, False):
        return True

    @functools.wraps(original)
    def maybe_reuse_cached_actor(self, trial) -> bool:
        if own_actor_started(self, trial):
            return False  # the trial waits for its own actor; the cached one stays cached
        return original(self, trial)

    setattr(maybe_reuse_cached_actor, _HOOKED, True)
    controller._maybe_reuse_cached_actor = maybe_reuse_cached_actor  # type: ignore[union-attr]
    return True


def own_actor_started(controller, trial) -> bool:
    """Whether Tune already started (created the process of) the actor it requested for
    ``trial``, which is not being reset onto a cached actor."""
    try:
        own = controller._trial_to_actor.get(trial)
        resetting = trial in controller._resetting_trials
        started = own is not None and controller._actor_manager.is_actor_started(own)
    except AttributeError:
        COUNTS["fallback"] += 1
        return False
    keep = started and not resetting
    COUNTS["kept" if keep else "delegated"] += 1
    return keep
