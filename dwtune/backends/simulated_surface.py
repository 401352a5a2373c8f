"""The simulated loss surfaces as pure functions (numpy only): the formulas of
:mod:`dwtune.backends.simulated`'s docstring, one function per term.

SIMULATED DATA. Everything here is a synthetic surface with a planted law, never a measurement.
Every function is a pure function of its arguments: a per-seed loss is deterministic in the seed
(draws come from a numpy Generator seeded by a hash of the inputs), so the backend and the
coverage benchmark see the very same surface.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dwtune.core.spec import SimulatedConfig

N_C = 8.8e13  # size scale of the power law (parameters)
ALPHA = 0.076  # power-law exponent of the loss in N
DIVERGE_EARLIEST = 0.05  # a diverging training blows up after at least 5% of its steps
NOISE_SIZE_REF = 1e8  # parameters: where the size_noise surface's sd equals `noise`
CURVE_DECAY = 5.0  # e-folds the excess loss decays over the run, on top of a linear ramp


# --------------------------------------------------------------------------- the planted law


def planted_width(config: SimulatedConfig, depth: float) -> float:
    """dx*(L) = exp(a + b·L)."""
    return math.exp(config.a + config.b * depth)


def planted_transition(config: SimulatedConfig, depth: float) -> float:
    """``N*(L) = 12·L·dx*(L)²``: where a configured pair with deeper depth L changes sign (on
    every surface; with a learning-rate penalty see ``mean_sign_changes``)."""
    return 12.0 * depth * planted_width(config, depth) ** 2


def size_term(n_params: float) -> float:
    return (N_C / n_params) ** ALPHA


def width_at(depth: float, n_params: float) -> float:
    """The (real-valued) width of a depth at paper size N = 12·L·w²."""
    return math.sqrt(n_params / (12.0 * depth))


# --------------------------------------------------------------------------- the links


def _bump(t: float) -> float:
    """A compact bump: (1 − t²)² for |t| < 1, exactly 0 outside (so N* stays exact)."""
    return (1.0 - t * t) ** 2 if abs(t) < 1.0 else 0.0


def _asymmetric(config: SimulatedConfig, u: float) -> float:
    """tanh below N*; above it a power-law approach to −ratio·gap (slope ratio·power)."""
    if u >= 0:
        return config.gap * math.tanh(u)
    deep_gap = config.asymmetry_gap_ratio * config.gap
    return -deep_gap * (1.0 - (1.0 - u) ** -config.asymmetry_power)


def link_term(config: SimulatedConfig, depth: int, log_n: float) -> float:
    """T(L, x): the planted gap (nats) of the pair whose deeper depth is L, at x = ln N."""
    distance = math.log(planted_transition(config, depth)) - log_n
    u = distance / config.transition_scale
    if config.surface == "depth_noise":
        return config.gap / (1.0 + config.gap_depth_slope * (depth - 1)) * math.tanh(u)
    if config.surface == "non_monotone":
        dip = (
            config.dip_size * config.gap * _bump((distance - config.dip_offset) / config.dip_width)
        )
        return config.gap * math.tanh(u) - dip
    if config.surface == "asymmetric":
        return _asymmetric(config, u)
    if config.surface == "flat":  # zero slope at N*: a tangent-like crossing
        return config.gap * math.tanh(u) ** 3
    return config.gap * math.tanh(u)


# --------------------------------------------------------------------------- learning rate


def lr_optimum(config: SimulatedConfig, width: float) -> float:
    """lr_opt(w) = lr_opt · (lr_base_width / w)^lr_width_exponent (1/width under SP)."""
    return config.lr_opt * (config.lr_base_width / width) ** config.lr_width_exponent


def lr_penalty(config: SimulatedConfig, width: float, lr: float | None) -> float:
    """lr_penalty · ln²(lr / lr_opt(w)) nats; 0 when off or when no learning rate is given."""
    if config.lr_penalty == 0 or lr is None:
        return 0.0
    return config.lr_penalty * math.log(lr / lr_optimum(config, width)) ** 2


# --------------------------------------------------------------------------- mean surface


def mean_loss_at(
    config: SimulatedConfig, linked: Sequence[int], depth: int, width: float, lr: float | None
) -> float:
    """S(N) + Σ T(ℓ, ln N) over the linked members of the chain + the lr penalty."""
    n_params = 12.0 * depth * width**2
    depth_term = sum(link_term(config, d, math.log(n_params)) for d in linked)
    loss = size_term(n_params) + depth_term
    penalty = lr_penalty(config, width, lr)
    return loss + penalty if penalty else loss


def pair_delta_mean(
    config: SimulatedConfig,
    depth_shallow: int,
    depth_deep: int,
    n: float,
    *,
    lr: float | None = None,
) -> float:
    """Noise-free Δ = loss(deep) − loss(shallow) of a configured pair at equal size ``n``:
    T(deep, ln n) plus the difference of the two nets' lr penalties at their own widths."""
    penalties = lr_penalty(config, width_at(depth_deep, n), lr) - lr_penalty(
        config, width_at(depth_shallow, n), lr
    )
    return link_term(config, depth_deep, math.log(n)) + penalties


def mean_sign_changes(
    config: SimulatedConfig,
    depth_shallow: int,
    depth_deep: int,
    *,
    lr: float | None = None,
    n_range: tuple[float, float] = (1e3, 1e16),
    points: int = 4000,
) -> tuple[float, ...]:
    """Every size in ``n_range`` where ``pair_delta_mean`` changes sign, found on a grid
    of ``points`` sizes and bisected to 1e-12 e-folds: the truth on every surface, including
    the crossing a learning-rate penalty shifts away from N*."""

    def delta(log_n: float) -> float:
        return pair_delta_mean(config, depth_shallow, depth_deep, math.exp(log_n), lr=lr)

    grid = np.linspace(math.log(n_range[0]), math.log(n_range[1]), points)
    signs = np.sign([delta(x) for x in grid])
    crossings = [math.exp(x) for x, s in zip(grid, signs, strict=True) if s == 0]
    for i in np.flatnonzero(signs[:-1] * signs[1:] < 0):
        low, high = float(grid[i]), float(grid[i + 1])
        while high - low > 1e-12:  # keep Δ's sign at ``low`` that of grid point i
            mid = 0.5 * (low + high)
            low, high = (mid, high) if np.sign(delta(mid)) == signs[i] else (low, mid)
        crossings.append(math.exp(0.5 * (low + high)))
    return tuple(sorted(crossings))


# --------------------------------------------------------------------------- per-seed noise


def loss_noise_sd(config: SimulatedConfig, depth: int, n_params: float = NOISE_SIZE_REF) -> float:
    """sd of one final loss (nats), outliers aside: noise, times 1 + slope·(L − 1) on
    depth_noise, times exp(noise_size_slope·ln(N / NOISE_SIZE_REF)) on size_noise."""
    if config.surface == "depth_noise":
        return config.noise * (1.0 + config.noise_depth_slope * (depth - 1))
    if config.surface == "size_noise":
        return config.noise * math.exp(
            config.noise_size_slope * math.log(n_params / NOISE_SIZE_REF)
        )
    return config.noise


def paired_noise_sd(
    config: SimulatedConfig,
    depth_shallow: int = 1,
    depth_deep: int = 1,
    n_params: float = NOISE_SIZE_REF,
) -> float:
    """sd of a same-seed loss difference between two depths at size ``n_params`` (nats),
    outliers aside: sqrt(σs² + σd² − 2ρ·σs·σd); σ·sqrt(2·(1 − ρ)) where σ does not depend on
    depth."""
    rho = config.seed_correlation
    if config.surface != "depth_noise":
        return loss_noise_sd(config, depth_deep, n_params) * math.sqrt(2.0 * (1.0 - rho))
    sd_s, sd_d = loss_noise_sd(config, depth_shallow), loss_noise_sd(config, depth_deep)
    return math.sqrt(max(0.0, sd_s**2 + sd_d**2 - 2.0 * rho * sd_s * sd_d))


def divergence_probability(config: SimulatedConfig, depth: int, lr: float | None) -> float:
    """P(diverge) = logistic(diverge_logit + diverge_depth_slope·L + diverge_lr_slope·ln(lr /
    lr_opt)) on the divergences surface (lr = lr_opt when none is given), else 0."""
    if config.surface != "divergences":
        return 0.0
    log_ratio = 0.0 if lr is None else math.log(lr / config.lr_opt)
    logit = config.diverge_logit + config.diverge_depth_slope * depth
    return 1.0 / (1.0 + math.exp(-(logit + config.diverge_lr_slope * log_ratio)))


def _generator(*key: object) -> np.random.Generator:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def standard_normal(*key: object) -> float:
    """A standard normal draw that is a pure function of ``key``."""
    return float(_generator(*key).standard_normal())


def uniform(*key: object) -> float:
    """A uniform [0, 1) draw that is a pure function of ``key``."""
    return float(_generator(*key).random())


@dataclass(frozen=True)
class SeedOutcome:
    """One simulated training's end: its final loss (NaN when diverged) and, when it
    diverged, the share of its steps it trained before blowing up."""

    loss: float
    diverged_at: float | None = None

    @property
    def diverged(self) -> bool:
        return self.diverged_at is not None


def seed_outcome(
    config: SimulatedConfig,
    linked: Sequence[int],
    depth: int,
    width: float,
    seed: int,
    *,
    lr: float | None = None,
    trial_key: Mapping | None = None,
) -> SeedOutcome:
    """The final loss of one training: mean + sd(L)·(sqrt(ρ)·z_seed + sqrt(1 − ρ)·z_own),
    z_own = sqrt(c)·z_seed_depth + sqrt(1 − c)·z_trial with c = seed_size_correlation (z_own =
    z_trial where c = 0, so a paired Δ's seed deviation is correlated c between sizes),
    + outlier_size for an outlier, or a divergence. ``trial_key`` names the trial's own draws
    (the backend passes its shape; by default the depth and width)."""
    key = dict(trial_key) if trial_key is not None else {"depth": depth, "width": width}
    if uniform("diverge", key, seed) < divergence_probability(config, depth, lr):
        share = DIVERGE_EARLIEST + (1.0 - DIVERGE_EARLIEST) * uniform("diverge_at", key, seed)
        return SeedOutcome(math.nan, share)
    rho = config.seed_correlation
    own = standard_normal("trial", key, seed)
    if config.seed_size_correlation > 0:  # the seed's luck at this depth, at every size
        persists = config.seed_size_correlation
        shared = standard_normal("seed_depth", depth, seed)
        own = math.sqrt(persists) * shared + math.sqrt(1.0 - persists) * own
    noise = math.sqrt(rho) * standard_normal("seed", seed) + math.sqrt(1.0 - rho) * own
    sd = loss_noise_sd(config, depth, 12.0 * depth * width**2)
    loss = mean_loss_at(config, linked, depth, width, lr) + sd * noise
    if is_outlier(config, depth, key, seed):
        loss += config.outlier_size
    return SeedOutcome(loss)


def is_outlier(config: SimulatedConfig, depth: int, key: Mapping, seed: int) -> bool:
    """On the outliers surface, a training of depth >= outlier_min_depth spikes with
    probability outlier_share."""
    if config.surface != "outliers" or depth < config.outlier_min_depth:
        return False
    return uniform("outlier", key, seed) < config.outlier_share


def pair_seed_outcomes(
    config: SimulatedConfig,
    depth_shallow: int,
    depth_deep: int,
    n: float,
    seed: int,
    *,
    lr: float | None = None,
) -> tuple[SeedOutcome, SeedOutcome]:
    """(shallow, deep) outcomes of one paired seed at equal size ``n`` for a pair configured
    alone: the deep loss minus the shallow one is pair_delta_mean plus the seed's paired
    noise (NaN where a net diverged)."""
    shallow = seed_outcome(config, (), depth_shallow, width_at(depth_shallow, n), seed, lr=lr)
    deep = seed_outcome(config, (depth_deep,), depth_deep, width_at(depth_deep, n), seed, lr=lr)
    return shallow, deep


# --------------------------------------------------------------------------- the curve


def curve_excess(progress: float | np.ndarray, depth: int, config: SimulatedConfig):
    """Share of the excess loss (start − final) left at ``progress`` (fraction of the steps):
    ``(1 − q)·exp(−CURVE_DECAY·q)`` with ``q = progress`` (curve interpolated) or, with
    curve late_descent, ``q = progress^(1 + curve_lag·ln L)``: a deeper net descends later,
    so a pair's partial Δ starts above its end value and closes on it at a slowing rate."""
    q = np.asarray(progress, dtype=float)
    if config.curve == "late_descent":
        q = q ** (1.0 + config.curve_lag * math.log(depth))
    return (1.0 - q) * np.exp(-CURVE_DECAY * q)


def eval_noise(config: SimulatedConfig, trial_key: Mapping, seed: int, step: int, total: int):
    """The reproducible sampling noise of one evaluation (nats): sd curve_eval_noise with curve
    late_descent at every eval but the last (whose noise the seed noise already holds), else 0."""
    if config.curve != "late_descent" or step >= total or config.curve_eval_noise == 0:
        return 0.0
    return config.curve_eval_noise * standard_normal("eval", dict(trial_key), seed, step)
