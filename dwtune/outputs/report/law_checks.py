"""The law's checks in the report: a section of report.md and ``figures/`` ``Figure.LAW_CHECKS``.

Both drawn from what the fit stage computed (:mod:`dwtune.core.fit.checks`) and stored in
fit.json (``law_checks``): the law's forms with AIC/AICc/BIC and the LR test of curvature,
leave-one-pair-out projections, and the study bootstrap's intervals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dwtune.core.fit import TransitionObservation
from dwtune.core.fit.checks import BOOTSTRAP_DONE
from dwtune.core.fit.forms import FORMS, transition_log_n
from dwtune.core.fit.loo import LOO_BUDGETS
from dwtune.core.units import format_size
from dwtune.core.vocabulary import TransitionStatus
from dwtune.outputs import competing_laws
from dwtune.storage.fit_json import COMPARED

BRACKETED = TransitionStatus.BRACKETED
CENSORED_HIGH = TransitionStatus.CENSORED_HIGH


@dataclass(frozen=True)
class LawChecks:
    record: dict  # fit.json["law_checks"]
    observations: tuple[TransitionObservation, ...]


# ---------------------------------------------------------------- markdown


def _n(value, fmt: str = ".3g") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–" if value is None or math.isnan(value) else "∞"
    return format(value, fmt)


def _forms_lines(forms: dict) -> list[str]:
    rows = ["| form | law | k | log L | AIC | AICc | BIC | χ²_red | L_opt 175B | L_opt 1T |",
            "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for f in forms["forms"]:
        depth = {p["budget"]: p["depth"] for p in f["projections"]}
        rows.append(
            f"| {f['form']} | {f['formula']} | {f['k']} | {_n(f['log_likelihood'], '.2f')} | "
            f"{_n(f['aic'], '.2f')} | {_n(f['aicc'], '.2f')} | {_n(f['bic'], '.2f')} | "
            f"{_n(f['chi2_red'], '.2f')} | {_n(depth.get(1.75e11), '.1f')} | "
            f"{_n(depth.get(1e12), '.1f')} |"
        )
    lr = forms["lr_test"]
    lines = [*rows, ""]
    lines.append(
        f"Curvature (LR test, quadratic vs linear): 2Δlog L = {_n(lr['statistic'], '.2f')}, "
        f"p = {_n(lr['p_value'], '.3f')} on 1 dof; "
        + ("**curvature detected** at 5%." if lr["curvature_detected"] else "none at 5%.")
        + f" Preferred: AIC {forms['best_aic']}, AICc {forms['best_aicc']}, "
        f"BIC {forms['best_bic']}."
    )
    lines += [f"- {s['form']} not fitted: {s['reason']}" for s in forms["skipped"]]
    return lines


def _loo_lines(record: dict) -> list[str]:
    rows = record["leave_one_pair_out"]
    if not rows:
        return [f"Leave-one-pair-out: not run ({record.get('leave_one_pair_out_reason', '')})."]
    head = ["| pair left out | status | a | b |"]
    head += [f" L_opt {format_size(b)} (shift) |" for b in LOO_BUDGETS]
    lines = ["".join(head), "|---|---|---|---|" + "---|" * len(LOO_BUDGETS)]
    for r in rows:
        by = {p["budget"]: p for p in r["projections"]}
        cells = [r["pair"], r["status"], _n(r["a"], ".4f"), _n(r["b"], ".5f")]
        for budget in LOO_BUDGETS:
            p = by.get(budget)
            cells.append(
                f"{_n(p['depth'], '.1f')} ({_n(p['depth_shift'], '+.1f')})" if p else r["note"]
            )
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _bootstrap_lines(boot: dict, name: str = "Study bootstrap") -> list[str]:
    if boot["status"] != BOOTSTRAP_DONE:
        return [f"{name}: not run ({boot['reason']})."]
    level = f"{boot['level']:.0%}"
    a, b = boot["a"], boot["b"]
    lines = [
        f"{name} ({boot['fitted']} of {boot['replicates']} replicates fitted; "
        f"{boot['method']}): a {level} [{a['low']:.4f}, {a['high']:.4f}], "
        f"b {level} [{b['low']:.5f}, {b['high']:.5f}] (sd {boot['sd_a']:.4f}, {boot['sd_b']:.5f})."
    ]
    for p in boot["projections"]:
        d = p["depth"]
        lines.append(
            f"- {format_size(p['budget'])}: optimal depth {_n(d['median'], '.1f')} "
            f"[{_n(d['low'], '.1f')}, {_n(d['high'], '.1f')}]"
        )
    if boot["failures"]:
        lines += [f"- {n} replicate(s) not fitted: {why}" for why, n in boot["failures"].items()]
    return lines


def capped_lines(pairs: Sequence[str]) -> list[str]:
    """The pairs that stopped on their round cap with a wide bracket, or nothing."""
    if not pairs:
        return []
    return [
        f"Stopped on the round cap with a wide bracket: {', '.join(pairs)}. Their 95% intervals "
        "span the bracket; where Δ bends inside it, N* there is an interpolation, and a law "
        "designed around a wrong guess can lean on it (more refine rounds narrow it).",
        "",
    ]


def kinked_lines(pairs: Sequence[str]) -> list[str]:
    """The pairs whose bracket is kinked (core/refine/kink.py), or nothing."""
    if not pairs:
        return []
    return [
        f"Kinked bracket: {', '.join(pairs)}. Beside the bracket Δ rises against ln N where one "
        "smooth crossing would fall, so N* there is interpolated across a bend and a law fitted "
        "through it leans on that interpolation (points beside the bracket, or the grid design, "
        "show the bend's shape).",
        "",
    ]


def _shape(law: dict, budget: float) -> str:
    p = next((p for p in law["projections"] if p["budget"] == budget), None)
    return f"{_n(p['depth'], '.0f')} × {_n(p['width'], '.0f')}" if p else "–"


def competing_markdown(record: dict | None) -> list[str]:
    """The competing published laws on the same pairs (fit.json ``competing_laws``), or
    nothing where fit.json predates them."""
    if record is None:
        return []
    if record["status"] != COMPARED:
        return [f"Competing laws: not compared ({record['reason']}).", ""]
    shapes = " | ".join(f"depth × width {format_size(b)}" for b in LOO_BUDGETS)
    rows = [f"| law | form | k | log L | AIC | AICc | LOO rms ln N\\* | {shapes} |",
            "|---|---|---|---|---|---|---|" + "---|" * len(LOO_BUDGETS)]  # fmt: skip
    for law in record["laws"]:
        cells = [law["law"], law["formula"], str(law["k"]), _n(law["log_likelihood"], ".2f"),
                 _n(law["aic"], ".2f"), _n(law["aicc"], ".2f"), _n(law["loo_rms_ln_n"], ".3f"),
                 *(_shape(law, b) for b in LOO_BUDGETS)]  # fmt: skip
        rows.append("| " + " | ".join(cells) + " |")
    verdict = competing_laws.verdict(record).replace("*", "\\*")
    return [*rows, "", f"Competing laws (docs/method.md): {verdict}.", ""]


def markdown(
    record: dict | None,
    capped: Sequence[str] = (),
    kinked: Sequence[str] = (),
    competing: dict | None = None,
) -> list[str]:
    """The report's "Is the law's form right?" section; ``capped``: the pairs that stopped on
    their round cap with a wide bracket; ``kinked``: the pairs whose bracket is kinked;
    ``competing``: fit.json's ``competing_laws``."""
    lines = ["## Law checks: form, leave-one-pair-out, study bootstrap", ""]
    flagged = [*capped_lines(capped), *kinked_lines(kinked)]
    if record is None:
        return [*lines, "No fit, so nothing to check.", "", *flagged]
    lines += flagged
    lines += [*_forms_lines(record["forms"]), "", *competing_markdown(competing)]
    lines += [*_loo_lines(record), ""]
    lines += _bootstrap_lines(record["bootstrap"])
    if "bootstrap_with_points" in record:
        lines += ["", *_bootstrap_lines(record["bootstrap_with_points"], "Sensitivity check")]
    lines += [
        "",
        "What this cannot show: with 5-7 pairs an information criterion separates forms only "
        "when they differ by several σ inside the measured depths; far beyond them (175B, 1T) "
        "every form is an extrapolation.",
        "",
    ]
    return lines


# ---------------------------------------------------------------- figure


def _draw_forms(ax, checks: LawChecks) -> None:
    fitted = [o for o in checks.observations if o.fitted]
    est = [o for o in fitted if o.status == BRACKETED]
    ax.errorbar([o.depth_deep for o in est], [o.log_width for o in est],
                yerr=[o.sigma_log_width for o in est], fmt="o", color="black",
                label="transitions")  # fmt: skip
    for o in fitted:
        if o.status != BRACKETED:
            up = o.status == CENSORED_HIGH
            ax.annotate("", (o.depth_deep, o.log_width + (0.3 if up else -0.3)),
                        (o.depth_deep, o.log_width), arrowprops={"arrowstyle": "->"})  # fmt: skip
    depths = np.linspace(min(o.depth_deep for o in fitted) * 0.8, 100.0, 200)
    by_name = {f.name: f for f in FORMS}
    for form_record in checks.record["forms"]["forms"]:
        form = by_name[form_record["form"]]
        theta = np.array([form_record["params"][p] for p in form.params])
        y = 0.5 * (transition_log_n(form, theta, depths) - np.log(12.0 * depths))
        ax.plot(depths, y, label=f"{form.name} (AIC {form_record['aic']:.1f})")
    ax.set_xlabel("depth L of the deeper net")
    ax.set_ylabel("ln dx*")
    ax.legend(fontsize=8)


def _draw_loo(ax, record: dict) -> None:
    rows = [r for r in record["leave_one_pair_out"] if r["projections"]]
    for k, budget in enumerate(LOO_BUDGETS):
        values = [next(p["depth"] for p in r["projections"] if p["budget"] == budget) for r in rows]
        line = ax.plot(values, np.arange(len(rows)) + 0.15 * k, "o", label=format_size(budget))
        full = _linear_depth(record, budget)
        if full is not None and math.isfinite(full):
            ax.axvline(full, color=line[0].get_color(), linestyle=":", linewidth=1)
    ax.set_yticks(np.arange(len(rows)), [f"without {r['pair']}" for r in rows], fontsize=8)
    ax.set_xlabel("projected optimal depth")
    ax.legend(fontsize=8)


def _linear_depth(record: dict, budget: float) -> float | None:
    """The full linear fit's optimal depth at ``budget`` (the dotted line of the LOO panel)."""
    linear = next((f for f in record["forms"]["forms"] if f["form"] == "linear"), None)
    by = {p["budget"]: p["depth"] for p in linear["projections"]} if linear else {}
    return by.get(budget)


def draw(checks: LawChecks | None, path: Path, new_figure, save) -> Path | None:
    """``figures/`` ``Figure.LAW_CHECKS``; ``new_figure(w, h)`` and ``save(fig, path)`` are the
    report's own (SIMULATED watermark, atomic write)."""
    if checks is None or not [o for o in checks.observations if o.fitted]:
        return None
    fig = new_figure(11, 4.5)
    left, right = fig.subplots(1, 2)
    _draw_forms(left, checks)
    left.set_title("law forms on the same likelihood", fontsize=10)
    _draw_loo(right, checks.record)
    right.set_title("leave-one-pair-out projections (dotted: all pairs)", fontsize=10)
    return save(fig, path)
