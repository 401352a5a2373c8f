"""Simulated transitions for the fit's tests: a planted law, Gaussian errors, censoring."""

from __future__ import annotations

import math

import numpy as np

from dwtune.core.fit import TransitionObservation

A, B = 5.039, 0.0555
PAIRS = ((6, 12), (12, 18), (18, 24), (24, 30), (30, 36), (36, 48))
SIGMA_LN = 0.2  # σ(ln N*) of every estimated transition


def planted_log_n(depth: float, a: float = A, b: float = B, c: float = 0.0) -> float:
    """ln N* = ln(12·L) + 2(a + b·L + c·L²)."""
    return math.log(12.0 * depth) + 2.0 * (a + b * depth + c * depth * depth)


def simulate_study(
    rng: np.random.Generator,
    *,
    upper: float = math.inf,
    c: float = 0.0,
    sigma: float = SIGMA_LN,
    pairs=PAIRS,
) -> list[TransitionObservation]:
    """One study: each pair's ln N* estimate = truth + σ·ε; above ``upper`` (ln N of the
    largest size compared) it is reported censored_high with that bound."""
    out = []
    for shallow, deep in pairs:
        estimate = planted_log_n(deep, c=c) + sigma * rng.normal()
        label = f"{shallow}-{deep}"
        if estimate > upper:
            out.append(TransitionObservation(label, shallow, deep, "censored_high", upper))
        else:
            out.append(TransitionObservation(label, shallow, deep, "bracketed", estimate, sigma))
    return out


def rule_coverage(level: float, dof: int, understated: float = 1.0) -> float:
    """Exact coverage of ``estimate ± interval_quantile(level, χ²_red, dof)·se`` for a linear
    fit with Gaussian errors whose true sd is ``understated`` times the stated one.

    Why exact: the error in stated se is ``understated·Z`` and ``χ²_red = understated²·C`` with
    ``C ~ χ²_dof/dof`` independent of Z, so the interval holds the truth with probability
    ``E_C[2Φ(q(understated²·C) / understated) − 1]``, integrated here over C's density."""
    from scipy import integrate, stats

    from dwtune.core.intervals import interval_quantile

    density = stats.chi2(dof, scale=1.0 / dof).pdf

    def held(c: float) -> float:
        q = interval_quantile(level, understated**2 * c, dof)
        return (2.0 * stats.norm.cdf(q / understated) - 1.0) * density(c)

    return float(integrate.quad(held, 0.0, math.inf)[0])
