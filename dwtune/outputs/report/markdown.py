"""report.md: the study's answer in Markdown, from what the store read."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from dwtune.core.fit import CensoredPair, chi2_tail, residual_z
from dwtune.core.projection import LEVINE2020
from dwtune.core.refine.transition import CAPPED_SENTENCE, KINKED_SENTENCE
from dwtune.core.units import format_size
from dwtune.core.vocabulary import (
    FIT_FILE,
    LEVEL,
    PROJECTIONS_FILE,
    SIMULATED_BANNER,
    SIMULATED_LABEL,
    Figure,
    FitStatus,
    TransitionStatus,
)
from dwtune.outputs.report import law_checks
from dwtune.outputs.report.cells import best_depth_table
from dwtune.outputs.report.efficiency import efficiency_section
from dwtune.outputs.report.limits import limits_section
from dwtune.outputs.tensorboard import FIT_BOARD
from dwtune.storage.experiment import Experiment
from dwtune.storage.fit_json import COMPETING_LAWS, GIT_KEY, FitOutcome
from dwtune.storage.fit_points import censored_pair

# ---------------------------------------------------------------- markdown


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _num(value: float, fmt: str = ".3g") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return "∞" if value == math.inf else format(value, fmt)


def _ratio(value: float) -> str:
    """How far a budget lies beyond the largest model trained: '17×', '5,714×'."""
    return _num(value, ",.0f" if value >= 10 else ".2g") + ("×" if math.isfinite(value) else "")


def _span(value: float, lo: float, hi: float, fmt: str) -> str:
    """``80.5 [79.9, 81.2]``; without an interval just the value."""
    if lo is None or (isinstance(lo, float) and math.isnan(lo)):
        return _num(value, fmt)
    close = ")" if hi == math.inf else "]"  # an open end: unbounded above
    return f"{_num(value, fmt)} [{_num(lo, fmt)}, {_num(hi, fmt)}{close}"


def _header(experiment: Experiment) -> list[str]:
    lines = [f"# dwtune report: {experiment.name}", ""]
    if experiment.simulated:
        lines += [
            f"> **⚠ {SIMULATED_BANNER}.** Every number below comes from the simulated trainer.",
            "",
        ]
    # Relative paths only: the folder can be moved, archived or shared and the links still work.
    lines += [
        f"Experiment folder `{experiment.root.name}/`: every path below is relative to it "
        "(the folder of this report).",
        "",
    ]
    return lines + [f"- note: {n}" for n in experiment.notes] + ([""] if experiment.notes else [])


def _measured_section(experiment: Experiment, cells: pd.DataFrame) -> list[str]:
    trials, completed = experiment.trials, experiment.completed
    counts = ", ".join(f"{k}: {v}" for k, v in trials["status"].value_counts().items()) or "none"
    lines = ["## What was trained", "", f"{len(trials)} trials ({counts})."]
    if completed.empty:
        return [*lines, "", "No completed trials yet.", ""]
    sizes = completed["params_non_embedding"].astype(float)
    lines.append(
        f"Depths {', '.join(str(int(d)) for d in sorted(cells['depth'].unique()))}; "
        f"non-embedding sizes {sizes.min():.3g} to {sizes.max():.3g}; "
        f"seeds per (depth, budget) cell: {int(cells['n'].min())} to {int(cells['n'].max())}."
    )
    best = best_depth_table(cells)
    if best.empty:
        return [*lines, "", "No budget has every depth trained yet.", ""]
    rows = [
        [
            _num(r.budget),
            str(r.depth),
            _num(r.width, ".0f"),
            _num(r.loss, ".4f"),
            _num(r.margin, ".4f"),
            str(r.seeds),
        ]
        for r in best.itertuples(index=False)
    ]
    headers = ["target budget", "best depth", "width", "loss", "margin to next depth", "seeds"]
    return [
        *lines,
        "",
        "Best depth at each budget where every depth trained (mean best validation loss over "
        "seeds; the refine stage's sizes, where only a pair's two depths trained, are in the "
        "transitions below):",
        "",
        _md_table(headers, rows),
        "",
    ]


def _transition_cells(row: pd.Series) -> list[str]:
    get = row.get
    if row["status"] == TransitionStatus.BRACKETED:
        found = (
            f"N* = {_num(get('n_star'))} in [{_num(get('n_star_low'))}, {_num(get('n_star_high'))}]"
            f"; dx* = {_num(get('width_deep'), '.1f')} ± {_num(get('width_deep_err'), '.1f')}"
        )
    else:
        found = censored_pair(row).describe()
    counts = [str(int(get(k))) if pd.notna(get(k, math.nan)) else "–" for k in ("trials", "seeds")]
    return [str(row["pair"]), str(row["status"]), found, *counts]


def _transitions_section(experiment: Experiment) -> list[str]:
    lines = ["## Transitions (refine stage)", ""]
    if experiment.transitions is None or experiment.transitions.empty:
        return [*lines, "No transitions yet: the refine stage has not written any pair.", ""]
    frame = experiment.transitions
    counts = frame["status"].value_counts()
    summary = ", ".join(f"{v} {k}" for k, v in counts.items())
    rows = [_transition_cells(r) for _, r in frame.iterrows()]
    table = _md_table(["pair", "status", "found", "trials", "seeds"], rows)
    return [*lines, f"{len(frame)} depth pair(s): {summary}.", "", table, ""]


def _pairs_flagged(experiment: Experiment, column: str, sentence: str) -> list[str]:
    """Pairs whose transitions.parquet ``column`` is true (capped_wide, kinked). A file written
    before those columns keeps the fact only in its statement, as ``sentence``
    (CAPPED_SENTENCE, KINKED_SENTENCE), which is read there instead."""
    frame = experiment.transitions
    if frame is None or frame.empty:
        return []
    if column in frame:
        flagged = frame[column].fillna(False).astype(bool)
    elif "statement" in frame:
        flagged = frame["statement"].astype(str).str.contains(sentence, regex=False)
    else:
        return []
    return [str(p) for p in frame.loc[flagged, "pair"]]


def _answer_section(experiment: Experiment, outcome: FitOutcome, rows, budgets) -> list[str]:
    """The study's answer first: each pair's statement, decided by the one sign rule, then
    the projection of the study's law at the tabulated budgets (or why there is none)."""
    lines = ["## Answer", ""]
    frame = experiment.transitions
    if frame is None or frame.empty:
        return [*lines, "No pair has been refined yet.", ""]
    for _, row in frame.iterrows():
        statement = row.get("statement")
        if not isinstance(statement, str) or not statement:  # a table from before statements
            _, status, found, *_ = _transition_cells(row)
            statement = f"{status}: {found}."
        lines.append(f"- **Pair {row['pair']}**: {statement}")
    return [*lines, *_answer_projection(outcome, rows, budgets), ""]


def _answer_projection(outcome: FitOutcome, rows: pd.DataFrame, budgets) -> list[str]:
    """One line per tabulated budget: the study law's optimal depth and width there."""
    if outcome.law is None:
        why = outcome.reason or "no fit"
        return [f"- **Projection**: none from this study ({why.rstrip('.')}); see Fit."]
    law = outcome.law
    lines = []
    for budget in budgets:
        row = _row(rows, law.name, "budget", "n_params", budget)
        if row is None:
            continue
        depth = _span(row.depth, row.depth_lo, row.depth_hi, ".1f")
        width = _span(row.width, row.width_lo, row.width_hi, ",.0f")
        lines.append(
            f"- **Projection at {format_size(budget)} parameters** (this study's law, "
            f"{LEVEL:.0%} intervals): optimal depth L* = {depth}, width dx* = {width}."
        )
    return lines


def _length_cells(row: pd.Series) -> list[str]:
    get = row.get
    check = _span(get("n_star_check"), get("n_star_check_low"), get("n_star_check_high"), ".3g")
    if row["status"] == TransitionStatus.BRACKETED:
        verdict = "**⚠ moved beyond its interval**" if row["moved"] else "within its interval"
    else:
        moved = " **⚠ moved past the checked points**" if row["moved"] else ""
        verdict = f"{row['status']}{moved}"
    return [
        str(row["pair"]),
        f"{_num(get('factor'), 'g')}×",
        _span(get("n_star"), get("n_star_low"), get("n_star_high"), ".3g"),
        check,
        _num(get("shift"), "+.3f"),
        _num(get("shift_sigma"), "+.1f"),
        _num(get("shift_interval"), "+.2f"),
        verdict,
    ]


def _length_section(experiment: Experiment) -> list[str]:
    """Training-length robustness (refine.length_check); nothing when it was not run."""
    frame = experiment.length_check
    if frame is None:
        return []
    lines = [
        "## Training-length robustness (refine.length_check)",
        "",
        "Each bracketed pair's points near its bracket retrained at factor × the training "
        "length with the same seeds; N*_f estimated from those points alone. shift = "
        "ln(N*_f / N*) in e-folds, in units of σ(ln N*) and of N*'s 95% half-interval on "
        "that side (beyond ±1: outside the interval). ⚠ marks a transition that moves by "
        "more than its interval.",
        "",
    ]
    if frame.empty:
        return [*lines, "No bracketed pair to check.", ""]
    moved = sorted({str(p) for p in frame.loc[frame["moved"].astype(bool), "pair"]})
    summary = (
        f"**⚠ {len(moved)} pair(s) move by more than their interval: {', '.join(moved)}.**"
        if moved
        else "No transition moves by more than its interval."
    )
    headers = ["pair", "length", "N* [95%]", "N*_f [95%]", "shift", "/ σ", "/ interval", ""]
    table = _md_table(headers, [_length_cells(r) for _, r in frame.iterrows()])
    return [*lines, summary, "", table, ""]


_METHODS = {
    "wls": "weighted least squares",
    "censored_mle": "interval-censored likelihood, errors from its observed information",
}


def _censored_note(record: dict) -> str:
    """' and 2 censored pair(s) (pair 36-48, ...)' where censored pairs are in the fit."""
    inside = record.get("censored_in_fit") or []
    excluded = record.get("excluded") or []
    note = f" and {len(inside)} censored pair(s) ({', '.join(inside)})" if inside else ""
    if excluded:
        note += "; excluded: " + "; ".join(f"{e['label']} ({e['reason']})" for e in excluded)
    return note


def _fit_lines(record: dict) -> list[str]:
    a_lo, a_hi = record["ci_a"]
    b_lo, b_hi = record["ci_b"]
    level = f"{record['level']:.0%}"
    rows = [
        [
            "a",
            f"{record['a']:.4f}",
            f"{record['se_a']:.4f}",
            f"[{a_lo:.4f}, {a_hi:.4f}]",
            f"{LEVINE2020.a}",
            f"{(LEVINE2020.a - record['a']) / record['se_a']:+.1f}",
        ],
        [
            "b",
            f"{record['b']:.5f}",
            f"{record['se_b']:.5f}",
            f"[{b_lo:.5f}, {b_hi:.5f}]",
            f"{LEVINE2020.b}",
            f"{(LEVINE2020.b - record['b']) / record['se_b']:+.1f}",
        ],
    ]
    headers = ["", "value", "std. error", f"{level} interval", "published", "published − fit (σ)"]
    return [
        f"ln dx* = a + b·L over {record['n_points']} bracketed transitions{_censored_note(record)} "
        f"({_METHODS.get(record.get('method'), 'weighted least squares')}; the transitions' "
        f"uncertainties taken as given, not rescaled; intervals{_quantile_note(record)}).",
        "",
        _md_table(headers, rows),
        "",
        f"cov(a, b) = {record['cov'][0][1]:.3g}; R² = {record['r2']:.4f}; "
        f"χ²_red = {record['chi2_red']:.3f} with {record['dof']} degrees of freedom "
        "(near 1: the uncertainties describe the scatter; well above 1: they understate it, "
        "and the intervals widen; well below 1: they overstate it, and the intervals narrow)"
        f"{_goodness_note(record)}.",
    ]


def _quantile_note(record: dict) -> str:
    """How wide the intervals are in std. errors and why (fit.json without it: normal)."""
    q = record.get("interval_quantile")
    if q is None:
        return " normal"
    if "scale_prior_dof" not in record:  # a fit.json written under an earlier rule
        return f" ± {q:.2f} std. errors ({record.get('interval_rule', 'rule not recorded')})"
    prior = record["scale_prior_dof"]
    return (
        f" ± {q:.2f} std. errors: Student's t scaled by the transitions' scatter about the law, "
        f"their σ a prior worth {prior:g} pseudo-observations, so they widen where the "
        "transitions scatter more than their σ say and narrow where less"
    )


def _goodness_note(record: dict) -> str:
    """How often exact uncertainties scatter this much, and the transition furthest off."""
    tail = chi2_tail(record["chi2_red"], record["dof"])
    points = record["points"]
    if math.isnan(tail) or not points:
        return ""
    columns = [[p[k] for p in points] for k in ("depth", "width", "width_err")]
    z = residual_z(record["a"], record["b"], *columns)
    worst = int(np.argmax(np.abs(z)))
    return (
        f"; P(χ² this large | exact σ) = {tail:.3g}; furthest from the law: "
        f"{points[worst]['label']} at {z[worst]:+.1f}σ"
    )


def _no_fit_lines(record: dict) -> list[str]:
    points, censored = record["points"], record["censored"]
    lines = [f"**No fit.** {record['reason']}", "", f"Found {len(points)} bracketed transition(s)"]
    lines[-1] += ":" if points else "."
    lines += [f"- {_point_line(p)}" for p in points]
    if censored:
        lines += ["", f"{len(censored)} pair(s) not bracketed:"]
        lines += [f"- pair {c['pair']}: {_describe(c)}" for c in censored]
    return lines


def _point_line(point: dict) -> str:
    seeds = f" ({point['seeds']} seeds)" if point.get("seeds") is not None else ""
    return (
        f"{point['label']}: depth {_num(point['depth'], 'g')}, "
        f"dx* = {_num(point['width'], '.1f')} ± {_num(point['width_err'], '.1f')}{seeds}"
    )


def _describe(censored: dict) -> str:
    nan = math.nan
    values = {k: (nan if v is None else v) for k, v in censored.items()}
    return CensoredPair(**values).describe()


def _fit_section(record: dict, outcome: FitOutcome) -> list[str]:
    lines = ["## Fit", ""]
    lines += _fit_lines(record) if record["status"] == FitStatus.FITTED else _no_fit_lines(record)
    if record["status"] == FitStatus.FITTED and outcome.law is None:
        lines += ["", f"**No projection from this fit:** {outcome.reason}."]
    return [*lines, ""]


def _row(rows: pd.DataFrame, law: str, query: str, column: str, value: float) -> pd.Series | None:
    match = rows[(rows["law"] == law) & (rows["query"] == query)]
    match = match[np.isclose(match[column], value, rtol=1e-12)]
    return match.iloc[0] if not match.empty else None


def _budget_cells(rows: pd.DataFrame, law: str | None, budget: float) -> list[str]:
    row = _row(rows, law, "budget", "n_params", budget) if law else None
    if row is None:
        return ["–", "–"]
    return [
        _span(row.depth, row.depth_lo, row.depth_hi, ".1f"),
        _span(row.width, row.width_lo, row.width_hi, ",.0f"),
    ]


BUDGET_HEADERS = [
    "budget N",
    "N / largest trained",
    "study L*",
    "study dx*",
    "Levine L*",
    "Levine dx*",
]


def _budget_table(experiment: Experiment, study_law: str | None, rows, budgets) -> str:
    """Optimal depth and width per budget, study beside reference, from the projection rows."""
    sizes = experiment.completed["params_non_embedding"].astype(float)
    largest = float(sizes.max()) if not sizes.empty else math.nan
    table = [
        [
            f"{format_size(n)} ({n:.3g})",
            _ratio(n / largest),
            *_budget_cells(rows, study_law, n),
            *_budget_cells(rows, LEVINE2020.name, n),
        ]
        for n in budgets
    ]
    return _md_table(BUDGET_HEADERS, table)


def _depth_table(outcome: FitOutcome, study_law: str | None, rows) -> str:
    """Transition size per depth (measured depths and GPT-3's 96), study beside reference."""
    table = []
    for depth in outcome.depths():
        ours = _row(rows, study_law, "depth", "depth", depth) if study_law else None
        ref = _row(rows, LEVINE2020.name, "depth", "depth", depth)
        mine = (
            "–" if ours is None else _span(ours.n_params, ours.n_params_lo, ours.n_params_hi, ".3g")
        )
        table.append([f"{depth:g}", mine, _num(ref.n_params)])
    return _md_table(["depth L", "study N*", "Levine N*"], table)


def _projection_section(experiment, outcome, rows, budgets) -> list[str]:
    study_law = outcome.law.name if outcome.law is not None else None
    return [
        "## Projection",
        "",
        "Optimal depth L* solves 12·L·exp(2(a + b·L)) = N; width dx* = exp(a + b·L*). "
        f"Brackets: {LEVEL:.0%} intervals from the fit covariance (inverting the band of "
        "ln N*(L); exact for Gaussian a, b; ')' marks an end the data leave open). "
        "The published fit has no covariance.",
        "",
        _budget_table(experiment, study_law, rows, budgets),
        "",
        "Transition size N*(L) = 12·L·exp(2(a + b·L)): below it, L layers are deeper than optimal.",
        "",
        _depth_table(outcome, study_law, rows),
        "",
    ]


# Every figure of the report has a caption (the analysis report captions its own).
CAPTIONS = {
    Figure.LOSS_VS_SIZE: "Figure 1. Best validation loss against non-embedding size, one line "
    "per depth (bars: sd over seeds).",
    Figure.DELTA_PER_PAIR: "Figure 2. Δ = loss(deeper) − loss(shallower) at equal size per depth "
    "pair; the transition N* where Δ turns negative is marked.",
    Figure.FIT: "Figure 3. ln dx* against depth: the transitions, the fitted line ln dx* = a + b·L "
    "and its band.",
    Figure.PROJECTION: "Figure 4. Projected optimal depth and width against budget up to 1e13 "
    "parameters, this study's law beside the published one.",
    Figure.LOSS_CURVES: "Figure 5. Validation loss against training step of the grid trials, "
    "one panel per depth, one line per trial (colour: size).",
    Figure.LAW_CHECKS: "Figure 6. Law checks: alternative law forms on the same likelihood "
    "(left) and leave-one-pair-out projections (right).",
    Figure.BEST_LR: "Figure 7. The best learning rate of each searched cell against width.",
}


def _figures_section(figures: tuple[Path, ...], exp_dir: Path, simulated: bool) -> list[str]:
    lines = ["## Figures", ""]
    if simulated and figures:
        lines += [f"Every figure is marked {SIMULATED_LABEL}: it draws the simulated trainer.", ""]
    for path in figures:
        rel = path.relative_to(exp_dir).as_posix()
        caption = CAPTIONS.get(path.name, path.stem.replace("_", " "))
        lines += [f"![{caption}]({rel})", "", f"*{caption}*", ""]
    return lines


def _files_section(meta: dict, tb: Path | None) -> list[str]:
    board = f"`{FIT_BOARD.as_posix()}` (TensorBoard text + scalars)" if tb else "no TensorBoard"
    return [
        "## Files",
        "",
        f"`{FIT_FILE}`, `{PROJECTIONS_FILE}` (the records behind every number above), {board}.",
        f"Git revision {meta.get(GIT_KEY, 'unknown')}; package versions in the Parquet metadata.",
        "",
    ]


def _markdown(experiment, outcome, cells, rows, budgets, record, figures, tb) -> str:
    sections = [
        _header(experiment),
        _answer_section(experiment, outcome, rows, budgets),
        _measured_section(experiment, cells),
        _transitions_section(experiment),
        _length_section(experiment),
        _fit_section(record, outcome),
        law_checks.markdown(
            record.get("law_checks"),
            _pairs_flagged(experiment, "capped_wide", CAPPED_SENTENCE),
            _pairs_flagged(experiment, "kinked", KINKED_SENTENCE),
            record.get(COMPETING_LAWS),
        ),
        _projection_section(experiment, outcome, rows, budgets),
        efficiency_section(experiment),
        limits_section(experiment),
        _figures_section(figures, experiment.root, experiment.simulated),
        _files_section(record["metadata"], tb),
    ]
    return "\n".join(line for section in sections for line in section)
