"""The human-readable form of `dwtune analyze` (plain formatting of its JSON dictionary)."""

from __future__ import annotations

import math

from dwtune.outputs.analysis import SIM_BANNER, STATUS_TEXT

POINT_HEADERS = ("N", "N shallow", "Δ (nats)", "± se", "seeds", "trend")


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


def pair_lines(pair: dict, law: str | None) -> list[str]:
    head = f"pair {pair['pair']}: {STATUS_TEXT[pair['status']]}; {n_star_text(pair)}"
    if law is not None:
        head += f"; {law} N* = {_num(pair['law_n_star'])}"
    headers = POINT_HEADERS + ((f"vs {law}",) if law else ())
    rows = []
    for p in pair["points"]:
        row = [_num(p["n"]), _num(p["n_shallow"]), _num(p["delta"], "+.4f")]
        row += [_num(p["delta_err"], ".4f"), p["seeds"], p["trend"]]
        rows.append(row + ([p["verdict"].replace("_", " ")] if law else []))
    noise = f"noise: {pair['noise_source']}"
    return [head, f"  {trend_text(pair)}; {noise}"] + ["  " + r for r in plain_table(headers, rows)]


def fit_lines(fit: dict) -> list[str]:
    if fit["status"] != "fitted":
        return [f"fit: none ({fit['reason']})"]
    lines = [
        f"fit of ln dx* = a + b·L over {fit['n_points']} crossing pairs (source: {fit['source']};"
        " N* read as 12·L·dx²)",
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
    for pair in result["pairs"]:
        lines += ["", *pair_lines(pair, law)]
    if ref:
        lines += ["", ref["summary"]]
    lines += ["", *fit_lines(result["fit"])]
    return "\n".join(lines)
