"""The human-readable form of `dwtune analyze`: plain text from its
:class:`~dwtune.core.analysis.result.AnalysisResult`."""

from __future__ import annotations

import io
import math

from dwtune.core import vocabulary
from dwtune.core.analysis.result import RULE_TEST, AnalysedPair, AnalysisResult, TableFit
from dwtune.core.analysis.verdicts import noise_range, to_decide
from dwtune.outputs.competing_laws import competing_lines
from dwtune.storage.fit_json import comparison_dict

STATUS_TEXT = {
    vocabulary.ANALYSIS_CROSSES: "crosses",
    vocabulary.ANALYSIS_DEEPER_WINS: "deeper wins throughout",
    vocabulary.ANALYSIS_DEEPER_LOSES: "deeper loses throughout",
    vocabulary.TransitionStatus.NON_MONOTONE: "non-monotone (several sign changes)",
    vocabulary.TransitionStatus.UNDECIDED: "undecided (Δ within noise)",
}
POINT_HEADERS = ("N", "N shallow", "Δ (nats)", "± se", "sign", "seeds", "trend")
SIGN_TEXT = {1: "+", -1: "−", 0: "0"}  # + deeper loses, − deeper wins, 0 within noise
NOISE_NAMES = {
    vocabulary.NOISE_MEASURED: "replicate runs",
    vocabulary.NOISE_CHECKPOINT_JITTER: "checkpoint jitter",
    vocabulary.NOISE_PRIOR: "assumed (nothing to measure it)",
    vocabulary.NOISE_TREND_SCATTER: "scatter about the trend",
}
TREND_KINDS = {
    "pooled": "one slope across all runs (the shallower depth has too few sizes)",
    "none": "none (equal sizes)",
}


def _num(value, fmt: str = ".3g") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, fmt)


def plain_table(headers, rows) -> list[str]:
    """Columns padded to their widest cell, right-aligned, two spaces apart: a rich table
    without borders or styles, rendered as plain text lines (never wrapped or cut)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="", highlight=False)
    for header in headers:
        table.add_column(str(header), justify="right", no_wrap=True)
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    out = io.StringIO()
    plain = {"color_system": None, "highlight": False, "markup": False, "emoji": False}
    Console(file=out, width=1_000_000, **plain).print(table)  # wide: no column shrinks
    return out.getvalue().splitlines()


def n_star_text(held: AnalysedPair) -> str:
    est = held.analysis.estimate
    if est.n_star is None or not math.isfinite(est.n_star):
        crossings = ", ".join(_num(c) for c in est.crossings)
        return f"sign changes near {crossings}" if crossings else "no N*"
    return (
        f"N* = {_num(est.n_star)} (95% {_num(est.n_star_low)} to "
        f"{_num(est.n_star_high)}; 68% {_num(est.n_star_low_68)} to "
        f"{_num(est.n_star_high_68)})"
    )


def trend_text(held: AnalysedPair) -> str:
    pair = held.analysis
    kinds = TREND_KINDS | {"own": f"depth {pair.depth_shallow:g}'s own runs"}
    parts = [f"{kinds[k]} at {n} point(s)" for k, n in sorted(pair.trends.items())]
    return "size trend: " + "; ".join(parts)


def law_text(held: AnalysedPair, law: str) -> str:
    """What the law says of the pair: one threshold (adjacent), or two with a silent band."""
    view = held.view
    text = f"{law} N* = {_num(view.n_star)}"
    if not math.isfinite(view.first_depth):
        return text
    return (
        f"{law}: deeper loses below N*({view.first_depth:g}) = "
        f"{_num(view.loses_below)}, wins above N*({held.analysis.depth_deep:g}) = "
        f"{_num(view.wins_above)}, silent between"
    )


def pair_noise_text(held: AnalysedPair) -> str:
    sd_low, sd_high, dof_low = noise_range(held.analysis)
    low, high = f"{sd_low:.2g}", f"{sd_high:.2g}"
    sd = low if low == high else f"{low}-{high}"
    name = NOISE_NAMES[held.analysis.noise.source]
    return f"noise: {name}, sd of Δ {sd} nats on ≥ {dof_low:.3g} dof"


def _point_rows(held: AnalysedPair, law: str | None) -> list[list]:
    pair, rows = held.analysis, []
    for i, m in enumerate(pair.points):
        row = [_num(m.point.n), _num(m.n_shallow), _num(pair.delta[i], "+.4f")]
        row += [_num(pair.delta_err[i], ".4f"), SIGN_TEXT[pair.signs[i]], len(m.point.deltas)]
        row.append(m.trend)
        rows.append(row + ([held.verdicts[i].replace("_", " ")] if law else []))
    return rows


# What would decide an undecided pair, by where its noise came from.
TO_DECIDE = {
    vocabulary.NOISE_PRIOR: "replicate runs (a seed column) or checkpoints (a tokens or step "
    "column) to measure the noise, which is only assumed here",
    vocabulary.NOISE_CHECKPOINT_JITTER: "replicate runs (a seed column), or sizes farther from N*",
    vocabulary.NOISE_MEASURED: "more seeds at the sizes within noise, or sizes farther from N*",
}


def status_text(held: AnalysedPair) -> str:
    """The pair's status; an undecided one also says what would decide it."""
    pair = held.analysis
    text = STATUS_TEXT[pair.status]
    if pair.status == vocabulary.TransitionStatus.UNDECIDED:
        text += f"; to decide it: {TO_DECIDE[pair.noise.source]}"
    return text


def pair_lines(held: AnalysedPair, law: str | None) -> list[str]:
    pair = held.analysis
    head = f"pair {pair.label}: {status_text(held)}; {n_star_text(held)}"
    if law is not None:
        head += f"; {law_text(held, law)}"
    headers = POINT_HEADERS + ((f"vs {law}",) if law else ())
    lines = [head, f"  {trend_text(held)}; {pair_noise_text(held)}"]
    decide = to_decide(pair)
    if decide is not None:
        lines.append(f"  to decide: {decide}")
    return lines + ["  " + r for r in plain_table(headers, _point_rows(held, law))]


def _jitter_lines(analysis: AnalysisResult) -> list[str]:
    noise = analysis.noise
    jitter = noise.jitter
    if jitter is None or noise.limits is None:
        return []
    lines = [
        f"  jitter measured on {jitter.runs_measured} of {jitter.runs_total} runs; sd "
        "of one loss reading per depth (nats):"
    ]
    for d in jitter.depths:
        flagged = "".join(
            f"; flagged {f.name}: sd {math.sqrt(f.variance):.2g} on {f.dof} dof" for f in d.flagged
        )
        lines.append(f"    depth {d.depth:g}: {d.sd:.2g} on {d.dof:g} dof ({d.runs} runs){flagged}")
    return [*lines, f"  what it cannot show: {noise.limits}"]


def noise_lines(analysis: AnalysisResult) -> list[str]:
    """The noise method in words, the per-depth jitter, and what it cannot show."""
    noise = analysis.noise
    lines = [f"noise ({NOISE_NAMES.get(noise.method, noise.method)}):"]
    lines += [f"  {text}" for _, text in noise.descriptions]
    lines += _jitter_lines(analysis)
    lines.append(
        f"signs: the one sign rule, α = {analysis.rule.alpha:g}, one look per point: {RULE_TEST}"
    )
    return lines


def warning_lines(analysis: AnalysisResult) -> list[str]:
    tokens = analysis.tokens
    lines = [f"warning: {w}" for w in tokens.warnings]
    if tokens.target_warning:
        lines.append(f"warning: {tokens.target_warning}")
    if not tokens.checked:
        lines.append("tokens: the table has no tokens or step column; Δ assumes equal training")
    return lines + [f"skipped: {s.reason}; skipped" for s in analysis.skipped]


def _censored(table: TableFit) -> str:
    """The bounded pairs the censored likelihood also used, and those it left out."""
    used = table.fit.censored_fitted
    text = f" and {len(used)} bounded pair(s) ({', '.join(used)})" if used else ""
    out = [f"{label}: {reason}" for label, reason in table.fit.excluded]
    return text + (f"; left out: {'; '.join(out)}" if out else "")


def fit_lines(table: TableFit) -> list[str]:
    fit = table.fit
    if fit is None:
        return [f"fit: none ({table.reason})"]
    lines = [
        f"fit of ln dx* = a + b·L over {fit.n_points} crossing pairs{_censored(table)} (source: "
        f"{table.source}; N* read as 12·L·dx²)",
        f"  a = {fit.a:.4f} ± {fit.se_a:.4f}   b = {fit.b:.5f} ± {fit.se_b:.5f}   "
        f"χ²_red = {_num(fit.chi2_red)} with {fit.dof} dof",
    ]
    rows = [
        [_num(p.budget), f"{p.depth:.1f}", f"{_num(p.depth_lo)} to {_num(p.depth_hi)}",
         f"{p.width:.0f}"]
        for p in table.projections
    ]  # fmt: skip
    if rows:
        lines += ["  projections of this fit (95% intervals):"]
        headers = ("budget", "depth", "depth interval", "width")
        lines += ["    " + r for r in plain_table(headers, rows)]
    return lines + competing_lines(comparison_dict(table.competing)) + loss_fit_lines(table)


def loss_fit_lines(table: TableFit) -> list[str]:
    """The separable law fitted to the runs' losses, held against the table's N*."""
    f = table.loss_fit
    if f is None:
        return []
    head = (
        f"  separable law fitted to {f.runs} runs' losses: A = {f.a_width:.4g}, "
        f"B = {f.b_depth:.4g}, E = {f.e_floor:.4g}, rms residual {f.rms_residual:.3g} nats"
    )
    if f.reason:
        return [head, f"    no crossings: {f.reason}"]
    return [
        head,
        f"    its crossings (c = ln(A/B) = {f.c:.4g}) against the table's N*: rms error of "
        f"ln N* {_num(f.rms_ln_n_error)} over {f.pairs} pairs (the ln dx* = a + b·L fit: "
        f"{_num(f.levine_rms_ln_n_error)})",
    ]


def reference_law(analysis: AnalysisResult) -> str | None:
    """The reference law's name, where the table was held against one."""
    return analysis.reference.reference.law.name if analysis.reference else None


def format_analysis(analysis: AnalysisResult) -> str:
    """The text `dwtune analyze` prints by default."""
    law = reference_law(analysis)
    lines = [vocabulary.SIMULATED_BANNER] if analysis.simulated else []
    ratio = math.exp(analysis.window)
    lines += [
        f"source: {analysis.source}",
        f"checkpoints: {analysis.checkpoints.describe()}",
        f"window: |ln N_deep - ln N_shallow| <= {analysis.window:.3g} (sizes within a factor "
        f"{ratio:.3g}); Δ = loss(deeper) - loss(shallower) at the deeper net's size",
    ]
    lines += noise_lines(analysis)
    lines += warning_lines(analysis)
    for pair in analysis.pairs:
        lines += ["", *pair_lines(pair, law)]
    if analysis.reference:
        lines += ["", f"agreement with {law}: {analysis.reference.test.summary}"]
    lines += ["", *fit_lines(analysis.fit)]
    return "\n".join(lines)
