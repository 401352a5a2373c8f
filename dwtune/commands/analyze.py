"""dwtune analyze: the transition analysis on a table of runs dwtune did not train.

RUNS is a CSV or Parquet file (one row per run, or per checkpoint of a run) or an experiment
directory (its trials.parquet). Prints how the noise was measured (replicate runs, else each
run's checkpoint jitter), per depth pair the Δ points with their signs at ``--alpha``, a status
and N* with its intervals (the refine stage's estimator), warnings where a point's runs differ
in tokens, the pairs skipped and why; with ``--reference`` it holds a law against every point
and tests the disagreements. Imports no torch, Ray or Optuna (matplotlib only with ``--report``).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from dwtune.commands import argtypes

WINDOW_HELP = (
    "largest |ln N_deep - ln N_shallow| compared, in e-folds of size (default 0.25), or a size "
    "ratio such as 1.3x"
)
COLUMNS_HELP = (
    "ROLE=COLUMN,... mapping the roles depth, width, params, loss (required) and seed, tokens, "
    "step, run (optional) to the table's column names, e.g. depth=n_layer,params=n_params"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    runs = parser.add_argument(
        "runs", metavar="RUNS", help="CSV, Parquet file or experiment directory"
    )
    argtypes.completes(runs, argtypes.FILE)
    parser.add_argument("--pairs", help="depth pairs SHALLOW-DEEP,... (default: adjacent depths)")
    parser.add_argument("--columns", help=COLUMNS_HELP)
    parser.add_argument("--tokens", help="use each run's checkpoint nearest to T tokens (e.g. 2e9)")
    parser.add_argument("--window", default="0.25", help=WINDOW_HELP)
    parser.add_argument(
        "--reference", help="levine2020, or an experiment directory whose fit.json holds a law"
    )
    parser.add_argument(
        "--alpha",
        default="0.05",
        help="false-sign rate of each point's two-sided sign test, and the level of the test of "
        "a --reference law (default 0.05)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--report", metavar="DIR", help="write report.md and figures to DIR")


def load_reference(text: str | None):
    """``levine2020`` or an experiment directory (or its fit.json) holding a fitted law."""
    from dwtune.core.analysis.result import Reference
    from dwtune.core.errors import InputError
    from dwtune.core.projection import reference
    from dwtune.core.vocabulary import FIT_FILE
    from dwtune.storage.fit_json import law_from_json

    if text is None:
        return None
    path = Path(text)
    if not path.exists() and "/" not in text and not text.endswith(".json"):
        law = reference(text)
        return Reference(law, law.name)
    fit_json = path / FIT_FILE if path.is_dir() else path
    if not fit_json.is_file():
        raise InputError(
            f"--reference: {text!r} is neither levine2020 nor an experiment directory with a "
            f"{FIT_FILE}; run `dwtune report` on it first"
        )
    law, _ = law_from_json(fit_json)
    return Reference(law, f"the fit of {fit_json.parent if path.is_dir() else fit_json}")


def parse_window(text: str) -> float:
    """``0.25`` (e-folds of size, |ln N_d − ln N_s|) or ``1.3x`` (a size ratio)."""
    from dwtune.core.errors import InputError

    raw = str(text).strip()
    try:
        value = math.log(float(raw[:-1])) if raw.lower().endswith("x") else float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise InputError(
            f"--window: got {text!r}; expected e-folds of size >= 0 such as 0.25, or a size "
            "ratio >= 1 such as 1.3x"
        )
    return value


def parse_alpha(text: str) -> float:
    """A false-sign rate strictly between 0 and 0.5 (``--alpha``)."""
    from dwtune.core.errors import InputError

    try:
        value = float(str(text).strip())
    except ValueError:
        value = math.nan
    if not 0 < value < 0.5:
        raise InputError(f"--alpha: got {text!r}; expected a rate between 0 and 0.5 such as 0.05")
    return value


def run(args: argparse.Namespace) -> int:
    import json

    from dwtune.core.analysis import parse_pairs
    from dwtune.core.analysis.pipeline import analyse
    from dwtune.core.units import parse_size
    from dwtune.outputs.analysis_json import analysis_dict
    from dwtune.outputs.analysis_text import format_analysis
    from dwtune.storage.runs import load_runs, parse_columns

    mapping = parse_columns(args.columns)
    tokens = parse_size(args.tokens, field="--tokens") if args.tokens else None
    window = parse_window(args.window)
    alpha = parse_alpha(args.alpha)
    pairs = parse_pairs(args.pairs) if args.pairs else None
    ref = load_reference(args.reference)
    loaded = load_runs(args.runs, mapping, tokens)
    result = analyse(
        loaded.table,
        loaded.source,
        loaded.simulated,
        pairs=pairs,
        window=window,
        tokens=tokens,
        ref=ref,
        alpha=alpha,
    )
    print(json.dumps(analysis_dict(result), indent=2) if args.json else format_analysis(result))
    if args.report:
        from dwtune.outputs.analysis_report import write_analysis_report

        written = write_analysis_report(result, args.report)
        stream = __import__("sys").stderr if args.json else None
        print(f"report: {written[0]}", file=stream)
        for path in written[1:]:
            print(f"  {path}", file=stream)
    return 0
