"""The human-readable form of `dwtune analyze` (plain formatting of its JSON dictionary)."""

from __future__ import annotations

import math

from dwtune.outputs.analysis import SIM_BANNER, STATUS_TEXT

POINT_HEADERS = ("N", "N shallow", "Δ (nats)", "± se", "sign", "seeds", "trend")
SIGN_TEXT = {1: "+", -1: "−", 0: "0"}  # + deeper loses, − deeper wins, 0 within noise
NOISE_NAMES = {
    "measured": "replicate runs",
    "checkpoint_jitter": "checkpoint jitter",
    "prior": "assumed (nothing to measure it)",
}


def _num(value, fmt: str = ".3g") -> str:
    return (
        "-"
        if value is None or (isinstance(value, float) and not math.isfinite(value))
        else (format(value, fmt))
    )


def plain_table(headers, rows) -> list[str]:
    """Columns padded to their widest cell, numbers right-aligned."""
    cells = [list(map(str, headers)), *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]


def n_star_text(pair: dict) -> str:
    if pair["n_star"] is None:
        crossings = ", ".join(_num(c) for c in pair["crossings"])
        return f"sign changes near {crossings}" if crossings else "no N*"
    return (
        f"N* = {_num(pair['n_star'])} (95% {_num(pair['n_star_low'])} to "
        f"{_num(pair['n_star_high'])}; 68% {_num(pair['n_star_low_68'])} to "
        f"{_num(pair['n_star_high_68'])})"
    )


def trend_text(pair: dict) -> str:
    kinds = {
        "own": f"depth {pair['depth_shallow']:g}'s own runs",
        "pooled": "one slope across all runs (the shallower depth has too few sizes)",
        "none": "none (equal sizes)",
    }
    parts = [f"{kinds[k]} at {n} point(s)" for k, n in sorted(pair["trend"].items())]
    return "size trend: " + "; ".join(parts)


def law_text(pair: dict, law: str) -> str:
    """What the law says of the pair: one threshold (adjacent), or two with a silent band."""
    text = f"{law} N* = {_num(pair['law_n_star'])}"
    if pair.get("law_first_depth") is None:
        return text
    return (
        f"{law}: deeper loses below N*({pair['law_first_depth']:g}) = "
        f"{_num(pair['law_loses_below'])}, wins above N*({pair['depth_deep']:g}) = "
        f"{_num(pair['law_wins_above'])}, silent between"
    )


def pair_noise_text(pair: dict) -> str:
    noise = pair["noise"]
    low, high = f"{noise['sd_low']:.2g}", f"{noise['sd_high']:.2g}"
    sd = low if low == high else f"{low}-{high}"
    name = NOISE_NAMES[noise["method"]]
    return f"noise: {name}, sd of Δ {sd} nats on ≥ {noise['dof_low']:.3g} dof"


def pair_lines(pair: dict, law: str | None) -> list[str]:
    head = f"pair {pair['pair']}: {STATUS_TEXT[pair['status']]}; {n_star_text(pair)}"
    if law is not None:
        head += f"; {law_text(pair, law)}"
    headers = POINT_HEADERS + ((f"vs {law}",) if law else ())
    rows = []
    for p in pair["points"]:
        row = [_num(p["n"]), _num(p["n_shallow"]), _num(p["delta"], "+.4f")]
        row += [_num(p["delta_err"], ".4f"), SIGN_TEXT[p["sign"]], p["seeds"], p["trend"]]
        rows.append(row + ([p["verdict"].replace("_", " ")] if law else []))
    lines = [head, f"  {trend_text(pair)}; {pair_noise_text(pair)}"]
    return lines + ["  " + r for r in plain_table(headers, rows)]


def noise_lines(result: dict) -> list[str]:
    """The noise method in words, the per-depth jitter, and what it cannot show."""
    noise = result["noise"]
    lines = [f"noise ({NOISE_NAMES.get(noise['method'], noise['method'])}):"]
    lines += [f"  {text}" for text in noise["description"].values()]
    jitter = noise["jitter"]
    if jitter is not None and noise["limits"] is not None:
        lines.append(
            f"  jitter measured on {jitter['runs_measured']} of {jitter['runs_total']} runs; sd "
            "of one loss reading per depth (nats):"
        )
        for d in jitter["per_depth"]:
            flagged = "".join(
                f"; flagged {f['run']}: sd {f['sd']:.2g} on {f['dof']} dof" for f in d["flagged"]
            )
            lines.append(
                f"    depth {d['depth']:g}: {d['sd']:.2g} on {d['dof']:g} dof ({d['runs']} runs)"
                f"{flagged}"
            )
        lines.append(f"  what it cannot show: {noise['limits']}")
    rule = result["rule"]
    lines.append(
        f"signs: the one sign rule, α = {rule['alpha']:g}, one look per point: {rule['test']}"
    )
    return lines


def warning_lines(result: dict) -> list[str]:
    tokens = result["tokens"]
    lines = [f"warning: {w}" for w in tokens["warnings"]]
    if tokens["target_warning"]:
        lines.append(f"warning: {tokens['target_warning']}")
    if not tokens["checked"]:
        lines.append("tokens: the table has no tokens or step column; Δ assumes equal training")
    return lines + [f"skipped: {s['reason']}; skipped" for s in result["skipped"]]


def _censored(fit: dict) -> str:
    """The bounded pairs the censored likelihood also used, and those it left out."""
    used = fit.get("censored_in_fit") or []
    text = f" and {len(used)} bounded pair(s) ({', '.join(used)})" if used else ""
    out = [f"{e['label']}: {e['reason']}" for e in fit.get("excluded") or []]
    return text + (f"; left out: {'; '.join(out)}" if out else "")


def fit_lines(fit: dict) -> list[str]:
    if fit["status"] != "fitted":
        return [f"fit: none ({fit['reason']})"]
    lines = [
        f"fit of ln dx* = a + b·L over {fit['n_points']} crossing pairs{_censored(fit)} (source: "
        f"{fit['source']}; N* read as 12·L·dx²)",
        f"  a = {fit['a']:.4f} ± {fit['se_a']:.4f}   b = {fit['b']:.5f} ± {fit['se_b']:.5f}   "
        f"χ²_red = {_num(fit['chi2_red'])} with {fit['dof']} dof",
    ]
    rows = [
        [
            _num(r["budget"]),
            f"{r['depth']:.1f}",
            f"{_num(r['depth_lo'])} to {_num(r['depth_hi'])}",
            f"{r['width']:.0f}",
        ]
        for r in fit["projections"]
    ]
    if rows:
        lines += ["  projections of this fit (95% intervals):"]
        headers = ("budget", "depth", "depth interval", "width")
        lines += ["    " + r for r in plain_table(headers, rows)]
    return lines


def format_analysis(result: dict) -> str:
    """The text `dwtune analyze` prints by default."""
    ref = result["reference"]
    law = ref["law"] if ref else None
    lines = [SIM_BANNER] if result["simulated"] else []
    ratio = math.exp(result["window"])
    lines += [
        f"source: {result['source']}",
        f"checkpoints: {result['checkpoints']['description']}",
        f"window: |ln N_deep - ln N_shallow| <= {result['window']:.3g} (sizes within a factor "
        f"{ratio:.3g}); Δ = loss(deeper) - loss(shallower) at the deeper net's size",
    ]
    lines += noise_lines(result)
    lines += warning_lines(result)
    for pair in result["pairs"]:
        lines += ["", *pair_lines(pair, law)]
    if ref:
        lines += ["", f"agreement with {ref['law']}: {ref['summary']}"]
    lines += ["", *fit_lines(result["fit"])]
    return "\n".join(lines)
