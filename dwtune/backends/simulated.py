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
``seed_size_correlation = c`` (default 0) splits ``z_trial`` into ``sqrt(c)·z_seed_depth +
sqrt(1 − c)·z_trial``, ``z_seed_depth`` a function of the seed and the depth alone: a seed's
luck at a depth persists across sizes, so a paired Δ's seed deviation is correlated ``c``
between any two sizes (as one data order and initialisation stream do in real training); each
sd is unchanged.

Surfaces
--------
``simulated.surface`` picks one; every parameter is a field of the ``simulated`` section (its
defaults in brackets) and, where it differs from its default, part of a trial's identity. The
pure functions live in ``dwtune.backends.simulated_surface``. Write ``u = (ln N*(Ld) − x) /
transition_scale`` (positive below ``N*``, where the deeper net loses) and ``σ = noise``.

- ``default``: the surface above, bit-for-bit: ``T = gap·tanh(u)``, sd ``σ`` at every depth.
- ``depth_noise``: the noise grows with depth and the gap shrinks with it::

        sd(L) = σ·(1 + noise_depth_slope·(L − 1))                     [0.1]
        T(Ld, x) = gap / (1 + gap_depth_slope·(Ld − 1)) · tanh(u)       [0.1]

  A paired Δ then has sd ``sqrt(sd(Ls)² + sd(Ld)² − 2ρ·sd(Ls)·sd(Ld))`` (``paired_noise_sd``).
- ``non_monotone``: a compact bump pulls Δ below zero once, ``dip_offset`` e-folds below the
  real crossing, before Δ returns positive and crosses for real at ``N*``::

        T = gap·tanh(u) − dip_size·gap·B((ln N*(Ld) − x − dip_offset) / dip_width)
        B(t) = (1 − t²)² for |t| < 1, else exactly 0        [dip_size 1.5, offset 2, width 0.5]

  With ``dip_size > tanh(dip_offset / transition_scale)`` the minimum is negative, so Δ has
  three sign changes (``mean_sign_changes``); ``dip_width < dip_offset`` keeps ``N*`` exact.
- ``outliers``: heavy tails: a training of depth ``>= outlier_min_depth`` [0] ends
  ``outlier_size`` [0.1] nats high with probability ``outlier_share`` [0.03], drawn from a
  uniform that is a pure function of the shape and seed.
- ``divergences``: a training diverges with probability::

        P(L, lr) = logistic(diverge_logit + diverge_depth_slope·L
                            + diverge_lr_slope·ln(lr / lr_opt))   [−4, 0.1, 2 per e-fold of lr]

  It reports its curve up to a step drawn in (5%, 100%] of the run, then one last report with
  ``train/loss`` and ``val/loss`` NaN and status ``diverged``, as the torch trainer does.
- ``lr_mistuned``: the tanh surface plus the learning-rate penalty (which needs
  ``lr_penalty > 0`` here, and applies on any surface where it is)::

        penalty(w, lr) = lr_penalty · ln²(lr / lr_opt(w))                       [nats; 0 = off]
        lr_opt(w)      = lr_opt · (lr_base_width / w)^lr_width_exponent    [3e-3, 256, 1]

  ``lr`` is the trial's learning rate (``spec.train.lr`` unless the caller passes ``lr=``;
  a searched rate reaches the backend as ``spec.train.lr`` through ``records.request_spec``).
  Under ``model.parametrization`` mup or completep the effective ``lr_width_exponent`` is 0
  (``effective_config``): the best rate no longer moves with width.
  Under standard parametrisation (exponent 1) the best rate falls as 1/width, so one shared
  rate mis-tunes the two nets of a pair differently: at equal N the deeper net is narrower
  and Δ gains ``penalty(w_d, lr) − penalty(w_s, lr)``, which moves the crossing away from
  ``N*(Ld)``; ``mean_sign_changes`` finds where it really is.
- ``asymmetric``: not a tanh: below ``N*`` ``gap·tanh(u)``; above it a slow power-law approach
  to a smaller gap::

        T = −asymmetry_gap_ratio·gap·(1 − (1 − u)^(−asymmetry_power))    for u < 0   [0.4, 0.5]

  so Δ's slope just above ``N*`` is ``asymmetry_gap_ratio·asymmetry_power`` times the slope below.

- ``flat``: a tangent-like crossing, Δ flat at ``N*`` (zero slope there)::

        T = gap·tanh(u)³

  so Δ stays within a seed's noise over a wide band around ``N*`` (about ±0.2 e-folds at the
  defaults and four seeds) and a chord through two points of that band says little about ``N*``.
- ``size_noise``: the seed noise grows with size (the tanh mean of ``default``)::

        sd(N) = σ·exp(noise_size_slope·ln(N / 1e8))                     [0.15 per e-fold]

  about 0.5σ at 1e6 and 2σ at 1e10, so one pooled sd is wrong at both ends of a grid.

- training length (any surface): with ``length_exponent`` [0 = off] every planted transition
  moves with the trial's total steps::

        N*(L; steps) = N*(L) · (steps / length_ref_steps)^length_exponent        [ref 1000]

  (``length_shifted``: ``a`` moves by ``length_exponent·ln(steps/ref)/2``), so
  ``refine.length_check`` has a known answer to find: ``ln(N*_f / N*) = length_exponent·ln f``.
  The seed noise does not depend on the length.

On every surface ``T(Ld, x*(Ld)) = 0`` exactly, so ``planted_transition`` is the crossing of each
configured pair (the real one on non_monotone); only the lr penalty moves it. The noiseless
Δ of a configured pair at equal ``n`` is ``pair_delta_mean(config, Ls, Ld, n, lr=None)``; the
per-seed outcome at real-valued width (for the coverage benchmark) is ``seed_outcome``, and
``pair_seed_outcomes(config, Ls, Ld, n, seed, lr=None)`` gives both nets of one paired seed.
A diverging training follows its noise-free mean curve until it blows up.

The curve: a validation report every ``train.eval_every`` steps up to the total (the last one
always), from ``ln(vocab_size)`` (at least one nat above the end) to the final loss; training
loss a little below it. ``simulated.curve`` picks its shape (``curve_excess``), with ``p`` the
fraction of the steps done and ``E(q) = (1 − q)·exp(−5q)`` the share of the excess loss left::

    interpolated  [default]:  loss(p) = final + (start − final)·E(p)        (decreasing)
    late_descent:             loss(p) = final + (start − final)·E(p^(1 + curve_lag·ln L)) + η

A deeper net descends later (``curve_lag`` [0.1]), so a pair's partial Δ starts above its end
value and closes on it at a slowing rate (at the defaults, 6 vs 12 layers: about 0.04 nats at
half the run, 0.003 at 80%); ``η`` is independent eval noise of sd ``curve_eval_noise`` [0.001
nats] at every eval but the last, which is exactly the final loss on both curves. So the end of
training, and every decision made from it, is the same under both curves; only a rule that
looks at partial curves (``dwtune.core.refine.early``) sees the difference. On
``interpolated`` a partial Δ already has the final sign, which makes any early rule look
perfect: measure one on ``late_descent``. No gradients exist: ``grad_norm`` and ``mfu`` are NaN;
``step_time_s`` is ``seconds_per_step`` (NaN when 0) and ``tokens_per_s`` follows from it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

from dwtune.backends.simulated_surface import (
    ALPHA,
    CURVE_DECAY,
    N_C,
    SeedOutcome,
    curve_excess,
    divergence_probability,
    eval_noise,
    link_term,
    loss_noise_sd,
    lr_optimum,
    lr_penalty,
    mean_loss_at,
    mean_sign_changes,
    pair_delta_mean,
    pair_seed_outcomes,
    paired_noise_sd,
    planted_transition,
    planted_width,
    seed_outcome,
    size_term,
)
from dwtune.core import vocabulary
from dwtune.core.budget import ModelShape
from dwtune.core.records import planted_chain
from dwtune.core.spec import ExperimentSpec, SimulatedConfig

__all__ = [
    "ALPHA",
    "CURVE_DECAY",
    "N_C",
    "divergence_probability",
    "final_loss",
    "link_term",
    "loss_noise_sd",
    "lr_optimum",
    "lr_penalty",
    "mean_loss",
    "mean_sign_changes",
    "pair_delta_mean",
    "pair_seed_outcomes",
    "paired_noise_sd",
    "planted_chain",
    "planted_transition",
    "planted_width",
    "seed_outcome",
    "simulate_training",
    "size_term",
]

TRAIN_GAP = 0.02  # nats the training loss ends below the validation loss
STATE_FILE = "simulated_state.json"  # a checkpoint: the last step reported


# --------------------------------------------------------------------------- one trial


def effective_config(spec: ExperimentSpec) -> SimulatedConfig:
    """The surface a trial sees: under mup and completep the best rate does not move with
    width (effective ``lr_width_exponent`` 0), as those parametrisations are built to do;
    with ``length_exponent`` the planted law of the trial's own training length."""
    config = spec.simulated
    if (
        spec.model.parametrization != vocabulary.Parametrization.SP
        and config.lr_width_exponent != 0
    ):
        config = dataclasses.replace(config, lr_width_exponent=0.0)
    if config.length_exponent == 0:  # (tokens_per_param specs have no total steps yet)
        return config
    return length_shifted(config, spec.train.total_steps(spec.data.seq_len))


def length_shifted(config: SimulatedConfig, total_steps: int) -> SimulatedConfig:
    """The surface of a training ``total_steps`` long: N* times (steps / length_ref_steps)^
    length_exponent, i.e. ``a`` moved by length_exponent·ln(steps / ref) / 2 (N* ∝ exp(2a)),
    every other term unchanged. ``config`` itself when length_exponent is 0."""
    if config.length_exponent == 0:
        return config
    shift = 0.5 * config.length_exponent * math.log(total_steps / config.length_ref_steps)
    return dataclasses.replace(config, a=config.a + shift, length_exponent=0.0)


def _linked(spec: ExperimentSpec, depth: int) -> tuple[int, ...]:
    return planted_chain(spec.refine.pairs, depth)[:-1]  # the last member has no partner


def mean_loss(spec: ExperimentSpec, depth: int, width: float, lr: float | None = None) -> float:
    """Noise-free final loss S(N) + D(L, ln N) (+ the lr penalty) at the size of (depth, width)."""
    return mean_loss_at(effective_config(spec), _linked(spec, depth), depth, width, lr)


def trial_outcome(
    spec: ExperimentSpec, shape: ModelShape, seed: int, lr: float | None = None
) -> SeedOutcome:
    """The trial's end on the configured surface (its lr: ``spec.train.lr`` unless given)."""
    return seed_outcome(
        effective_config(spec),
        _linked(spec, shape.depth),
        shape.depth,
        shape.width,
        seed,
        lr=spec.train.lr if lr is None else lr,
        trial_key=dataclasses.asdict(shape),
    )


def final_loss(
    spec: ExperimentSpec, shape: ModelShape, seed: int, lr: float | None = None
) -> float:
    """The trial's final validation loss: mean loss plus its reproducible seed noise (NaN
    when the training diverges)."""
    return trial_outcome(spec, shape, seed, lr).loss


# --------------------------------------------------------------------------- the curve


def eval_steps(total_steps: int, eval_every: int) -> list[int]:
    """Every ``eval_every`` steps, and the last step."""
    steps = list(range(eval_every, total_steps, eval_every))
    return [*steps, total_steps]


def val_loss_at(step: int, total_steps: int, start: float, final: float) -> float:
    """Decreasing from ``start`` at step 0 to exactly ``final`` at the last step."""
    progress = step / total_steps
    return final + (start - final) * (1.0 - progress) * math.exp(-CURVE_DECAY * progress)


def curve_loss_at(
    spec: ExperimentSpec, shape: ModelShape, seed: int, step: int, losses: tuple[float, float]
) -> float:
    """The reported validation loss at ``step`` on ``simulated.curve`` (module doc)."""
    config, total = spec.simulated, spec.train.total_steps(spec.data.seq_len)
    if config.curve == "interpolated":
        return val_loss_at(step, total, *losses)
    start, final = losses
    excess = float(curve_excess(step / total, shape.depth, config))
    noise = eval_noise(config, dataclasses.asdict(shape), seed, step, total)
    return final + (start - final) * excess + noise


def _report_at(
    spec: ExperimentSpec,
    step: int,
    total: int,
    losses: tuple[float, float],
    elapsed_s: float,
    val: float | None = None,
    best: float | None = None,
) -> dict:
    start, final = losses
    val = val_loss_at(step, total, start, final) if val is None else val
    tokens_per_step = spec.train.batch_size * spec.data.seq_len
    step_time = spec.simulated.seconds_per_step or math.nan
    return {
        vocabulary.STEP: step,
        vocabulary.TOKENS: step * tokens_per_step,
        vocabulary.TRAIN_LOSS: val - TRAIN_GAP * step / total,
        vocabulary.VAL_LOSS: val,
        vocabulary.VAL_LOSS_SE: 0.0,  # the surface's noise is all seed noise: no eval sampling
        vocabulary.VAL_BEST_LOSS: val if best is None else best,  # interpolated: decreasing
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


def _diverged_report(
    spec: ExperimentSpec, step: int, total: int, best: float, elapsed_s: float
) -> dict:
    """The torch trainer's report of a blown-up training: no evaluation, the losses NaN, the
    best validation loss so far kept, status diverged."""
    return {
        **_report_at(spec, step, total, (math.nan, math.nan), elapsed_s),
        vocabulary.VAL_BEST_LOSS: best,
        vocabulary.STATUS: vocabulary.STATUS_DIVERGED,
    }


def _last_step(outcome: SeedOutcome, total: int) -> int:
    """The step the run ends at: the total, or where a diverging run blows up."""
    if not outcome.diverged:
        return total
    return max(1, min(total, round(outcome.diverged_at * total)))


def _curve_ends(
    spec: ExperimentSpec, shape: ModelShape, outcome: SeedOutcome, lr: float | None
) -> tuple[float, float]:
    """(start, final) of the reported curve; a diverging run follows its noise-free mean."""
    if outcome.diverged:
        final = mean_loss(spec, shape.depth, shape.width, spec.train.lr if lr is None else lr)
    else:
        final = outcome.loss
    return max(math.log(spec.data.vocab_size), final + 1.0), final


def simulate_training(
    spec: ExperimentSpec,
    shape: ModelShape,
    seed: int,
    report: Callable[[dict, str | None], None],
    *,
    checkpoint_dir: str | None = None,
    resume_from: str | None = None,
    lr: float | None = None,
) -> dict:
    """The backend (see ``dwtune.backends.trial``): report the simulated curve, return
    its end. ``lr`` is the trial's learning rate (``spec.train.lr`` when None)."""
    total = spec.train.total_steps(spec.data.seq_len)
    outcome = trial_outcome(spec, shape, seed, lr)
    losses = _curve_ends(spec, shape, outcome, lr)
    end = _last_step(outcome, total)
    done = _resume_step(resume_from)
    started = time.perf_counter()
    last: dict = {}
    previous = done
    steps = eval_steps(total, spec.train.eval_every)
    best = math.inf
    for step in (s for s in steps if done < s and (s < end or s == total == end)):
        time.sleep(spec.simulated.seconds_per_step * (step - previous))
        previous = step
        val = curve_loss_at(spec, shape, seed, step, losses)
        best = min(best, val)
        last = _report_at(spec, step, total, losses, time.perf_counter() - started, val, best)
        if step == total:
            last[vocabulary.STATUS] = vocabulary.STATUS_FINISHED
        report(dict(last), _save_state(checkpoint_dir, step))
    if outcome.diverged:
        time.sleep(spec.simulated.seconds_per_step * max(0, end - previous))
        best = last.get(vocabulary.VAL_BEST_LOSS, math.nan)
        last = _diverged_report(spec, end, total, best, time.perf_counter() - started)
        report(dict(last), _save_state(checkpoint_dir, end))
    elif not last:  # resumed after the last report: nothing left to train
        last = {
            **_report_at(spec, total, total, losses, 0.0),
            vocabulary.STATUS: vocabulary.STATUS_FINISHED,
        }
    return last
