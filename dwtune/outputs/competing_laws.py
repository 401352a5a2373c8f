"""The competing laws in words: which law the transitions prefer, by how much, and where each
projects 175B and 1T (from fit.json's ``competing_laws``, :mod:`dwtune.core.fit.competing`).

Shared by ``dwtune fit``, ``dwtune analyze`` and the report, so the three say it alike.
"""

from __future__ import annotations

import math

from dwtune.core.units import format_size

CRITERION_NAMES = {"aicc": "AICc", "aic": "AIC"}


def _n(value: float | None, fmt: str) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return format(value, fmt)


def verdict(record: dict) -> str:
    """One line: the preferred law and its margin, or that the data prefer neither."""
    name = CRITERION_NAMES.get(record["criterion"], record["criterion"])
    margin = f"Δ{name} = {_n(record['margin'], '.1f')}"
    if record["preferred"]:
        return f"preferred law: {record['preferred']} ({margin} over the other)"
    if record["best"] is None or len(record["laws"]) < 2:
        return "preferred law: none (fewer than two laws could be fitted)"
    limit = record["no_preference_below"]
    return (
        f"preferred law: none ({margin} < {limit:g}: {record['best']} is only ahead; "
        "the data do not choose)"
    )


def _shapes(law: dict) -> str:
    return "; ".join(
        f"{format_size(p['budget'])}: depth {_n(p['depth'], '.0f')} × width {_n(p['width'], '.0f')}"
        for p in law["projections"]
    )


def law_line(law: dict, criterion: str) -> str:
    """One law: its form, criterion, leave-one-pair-out error and projections."""
    name = CRITERION_NAMES.get(criterion, criterion)
    params = ", ".join(f"{k} = {_n(v, '.4g')}" for k, v in law["params"].items())
    loo = f"{_n(law['loo_rms_ln_n'], '.3f')} over {law['loo_pairs']} held-out pairs"
    return (
        f"{law['law']} ({law['formula']}; {params}): {name} {_n(law[criterion], '.2f')}, "
        f"leave-one-pair-out rms error of ln N* {loo}; {_shapes(law)}"
    )


def competing_lines(record: dict | None, indent: str = "  ") -> list[str]:
    """The comparison as text lines (a verdict, then one line per law), or why there is none."""
    if record is None:
        return []
    if record.get("status") != "compared":
        return [f"competing laws: not compared ({record.get('reason', '')})"]
    lines = [f"competing laws on the same pairs: {verdict(record)}"]
    lines += [indent + law_line(law, record["criterion"]) for law in record["laws"]]
    lines += [f"{indent}{s['law']} not fitted: {s['reason']}" for s in record["skipped"]]
    return lines
