"""The simulated trainer backend (pure: numpy): a documented loss surface with a planted law.

SIMULATED DATA. Nothing this module produces is a measurement of a model; every record it
feeds is marked ``simulated``. It exists so the whole pipeline runs in seconds, and so a study
(seeds, tolerance, budget range) can be rehearsed before GPU hours are spent on it.

The surface
-----------
A trained net of depth ``L`` and width ``w`` (``shape.width``: the rounded width the grid
really trains) has the paper's size ``N = 12·L·w²``; write ``x = ln N``. Its final validation
loss for seed ``s`` is::

    loss(L, w, s) = S(N) + D(L, x) + ε(L, w, s)

- size term ``S(N) = (N_C / N)^ALPHA`` with ``N_C = 8.8e13``, ``ALPHA = 0.076`` (Kaplan et al.
  2020's fit for non-embedding parameters): smooth, from about 4.0 nats at 1e6 to 2.0 at 1e10.
- planted transition size of a depth, from ``simulated.a`` and ``simulated.b``::

      ln dx*(L) = a + b·L,   N*(L) = 12·L·dx*(L)²,   x*(L) = ln(12·L) + 2·(a + b·L)

- one link per configured pair ``(Ls, Ld)`` of ``refine.pairs``, owned by its deeper depth::

      T(Ld, x) = gap · tanh((x*(Ld) − x) / transition_scale)

- depth term: the partner of ``Ld`` is the ``Ls`` of its pair; the planted chain of a depth is
  ``chain(L) = (L, partner(L), partner(partner(L)), ...)`` down to a depth without a partner,
  and ``D(L, x)`` sums the links ``T(ℓ, x)`` of every member of the chain that has a partner
  (``D = 0`` for a depth in no pair as the deeper one).

Derivation of the planted sign change. For a configured pair, ``chain(Ld) = (Ld,) + chain(Ls)``,
so every link but one cancels in the difference at equal ``N``::

    Δ(N) = loss(Ld) − loss(Ls) = S(N) − S(N) + D(Ld, x) − D(Ls, x) = T(Ld, x)
         = gap · tanh((ln N*(Ld) − ln N) / transition_scale)

``Δ`` is positive below ``N*(Ld)`` (the deeper net loses), exactly zero at ``N*(Ld)`` and
negative above it, with ``|Δ| < gap`` and slope ``−gap / transition_scale`` nats per e-fold of
``N`` at the crossing. So each configured pair changes sign at the planted ``N*`` of its deeper
depth, whose width there is ``sqrt(N* / (12·Ld)) = exp(a + b·Ld)``: the law ``ln dx* = a + b·L``
holds exactly on the surface. Why links and not a function of depth alone: the crossing of
``(Ls, Ld)`` must land at ``N*(Ld)`` whatever ``Ls`` is, but at ``N*(Ld)`` a depth-only surface
would then need all shallower depths to tie, which contradicts the shallower pairs' own
transitions; so each deeper depth has one partner (the spec refuses a depth that is the deeper
one of two pairs), and the partners are part of a simulated trial's identity. A pair that is not
configured (say 6 and 18 when 6-12 and 12-18 are) sums two links and changes sign between the
two planted sizes.

Equal ``N`` matters: two depths trained at one budget have slightly different rounded widths,
so their sizes differ by a few percent and ``S`` alone shifts their loss difference by about
``ALPHA·S(N)·(x_d − x_s)``; the refine stage compares at equal ``N`` (it moves the shallower
net's loss along its size trend), as a study of real models must.

Seed noise: ``ε = noise · (sqrt(ρ)·z_seed + sqrt(1 − ρ)·z_trial)`` with standard normals
``z_seed`` (a function of the seed alone) and ``z_trial`` (of the shape and the seed), each
drawn from a numpy Generator seeded by a hash of those inputs, so a trial's loss is reproducible.
``ρ = seed_correlation`` models paired seeds: the same seed means the same data order at every
depth and size, so it shares ``ρ`` of the noise variance. Each loss has standard deviation
``noise``; a paired difference (same seed, two depths) has ``noise · sqrt(2·(1 − ρ))``.

The curve: a validation report every ``train.eval_every`` steps up to the total (the last one
always), decreasing from ``ln(vocab_size)`` (at least one nat above the end) to the final loss;
training loss a little below it. No gradients exist: ``grad_norm`` and ``mfu`` are NaN;
``step_time_s`` is ``seconds_per_step`` (NaN when 0) and ``tokens_per_s`` follows from it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dwtune.core import vocabulary
from dwtune.core.budget import ModelShape, paper_size
from dwtune.core.records import planted_chain
from dwtune.core.spec import ExperimentSpec, SimulatedConfig

N_C = 8.8e13  # size scale of the power law (parameters)
ALPHA = 0.076  # power-law exponent of the loss in N
TRAIN_GAP = 0.02  # nats the training loss ends below the validation loss
CURVE_DECAY = 5.0  # e-folds the excess loss decays over the run, on top of a linear ramp
STATE_FILE = "simulated_state.json"  # a checkpoint: the last step reported


# --------------------------------------------------------------------------- the planted law


def planted_width(config: SimulatedConfig, depth: float) -> float:
    """dx*(L) = exp(a + b·L)."""
    return math.exp(config.a + config.b * depth)


def planted_transition(config: SimulatedConfig, depth: float) -> float:
    """N*(L) = 12·L·dx*(L)²: where a configured pair with deeper depth L changes sign."""
    return 12.0 * depth * planted_width(config, depth) ** 2


def paired_noise_sd(config: SimulatedConfig) -> float:
    """Standard deviation of a same-seed loss difference between two depths (nats)."""
    return config.noise * math.sqrt(2.0 * (1.0 - config.seed_correlation))


def size_term(n_params: float) -> float:
    return (N_C / n_params) ** ALPHA


def link_term(config: SimulatedConfig, depth: int, log_n: float) -> float:
    """T(L, x): the planted gap of the pair whose deeper depth is L."""
    distance = math.log(planted_transition(config, depth)) - log_n
    return config.gap * math.tanh(distance / config.transition_scale)


def mean_loss(spec: ExperimentSpec, depth: int, width: int) -> float:
    """Noise-free final loss S(N) + D(L, ln N) at the paper size of (depth, width)."""
    n_params = paper_size(depth, width)
    linked = planted_chain(spec.refine.pairs, depth)[:-1]  # the last member has no partner
    depth_term = sum(link_term(spec.simulated, d, math.log(n_params)) for d in linked)
    return size_term(n_params) + depth_term


def _normal(*key: object) -> float:
    """A standard normal draw that is a pure function of ``key``."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).digest()
    return float(np.random.default_rng(int.from_bytes(digest[:8], "little")).standard_normal())


def final_loss(spec: ExperimentSpec, shape: ModelShape, seed: int) -> float:
    """The trial's final validation loss: mean loss plus its reproducible seed noise."""
    rho = spec.simulated.seed_correlation
    z_seed = _normal("seed", seed)
    z_trial = _normal("trial", dataclasses.asdict(shape), seed)
    noise = math.sqrt(rho) * z_seed + math.sqrt(1.0 - rho) * z_trial
    return mean_loss(spec, shape.depth, shape.width) + spec.simulated.noise * noise


# --------------------------------------------------------------------------- the curve


def eval_steps(total_steps: int, eval_every: int) -> list[int]:
    """Every ``eval_every`` steps, and the last step."""
    steps = list(range(eval_every, total_steps, eval_every))
    return [*steps, total_steps]


def val_loss_at(step: int, total_steps: int, start: float, final: float) -> float:
    """Decreasing from ``start`` at step 0 to exactly ``final`` at the last step."""
    progress = step / total_steps
    return final + (start - final) * (1.0 - progress) * math.exp(-CURVE_DECAY * progress)


def _report_at(
    spec: ExperimentSpec, step: int, total: int, losses: tuple[float, float], elapsed_s: float
) -> dict:
    start, final = losses
    val = val_loss_at(step, total, start, final)
    tokens_per_step = spec.train.batch_size * spec.data.seq_len
    step_time = spec.simulated.seconds_per_step or math.nan
    return {
        vocabulary.STEP: step,
        vocabulary.TOKENS: step * tokens_per_step,
        vocabulary.TRAIN_LOSS: val - TRAIN_GAP * step / total,
        vocabulary.VAL_LOSS: val,
        vocabulary.VAL_LOSS_SE: 0.0,  # the surface's noise is all seed noise: no eval sampling
        vocabulary.VAL_BEST_LOSS: val,  # the curve only decreases
        vocabulary.LR: spec.train.lr_at(step, total),
        vocabulary.GRAD_NORM: math.nan,
        vocabulary.TOKENS_PER_S: tokens_per_step / step_time,
        vocabulary.STEP_TIME_S: step_time,
        vocabulary.MFU: math.nan,
        vocabulary.ELAPSED_S: elapsed_s,
    }


def _resume_step(resume_from: str | None) -> int:
    if resume_from is None or not (Path(resume_from) / STATE_FILE).exists():
        return 0
    return int(json.loads((Path(resume_from) / STATE_FILE).read_text())["step"])


def _save_state(checkpoint_dir: str | None, step: int) -> str | None:
    if checkpoint_dir is None:
        return None
    Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
    (Path(checkpoint_dir) / STATE_FILE).write_text(json.dumps({"step": step}))
    return checkpoint_dir


def simulate_training(
    spec: ExperimentSpec,
    shape: ModelShape,
    seed: int,
    report: Callable[[dict, str | None], None],
    *,
    checkpoint_dir: str | None = None,
    resume_from: str | None = None,
) -> dict:
    """The backend (see :mod:`dwtune.backends.trial`): report the simulated curve, return
    its end."""
    total = spec.train.total_steps(spec.data.seq_len)
    final = final_loss(spec, shape, seed)
    losses = (max(math.log(spec.data.vocab_size), final + 1.0), final)
    done = _resume_step(resume_from)
    started = time.perf_counter()
    last: dict = {}
    previous = done
    for step in (s for s in eval_steps(total, spec.train.eval_every) if s > done):
        time.sleep(spec.simulated.seconds_per_step * (step - previous))
        previous = step
        last = _report_at(spec, step, total, losses, time.perf_counter() - started)
        if step == total:
            last[vocabulary.STATUS] = vocabulary.STATUS_FINISHED
        report(dict(last), _save_state(checkpoint_dir, step))
    if not last:  # resumed after the last report: nothing left to train
        last = {
            **_report_at(spec, total, total, losses, 0.0),
            vocabulary.STATUS: vocabulary.STATUS_FINISHED,
        }
    return last
