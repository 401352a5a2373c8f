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

WINDOW_HELP = (
    "largest |ln N_deep - ln N_shallow| compared, in e-folds of size (default 0.25), or a size "
    "ratio such as 1.3x"
)
COLUMNS_HELP = (
    "ROLE=COLUMN,... mapping the roles depth, width, params, loss (required) and seed, tokens, "
    "step, run (optional) to the table's column names, e.g. depth=n_layer,params=n_params"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", metavar="RUNS", help="CSV, Parquet file or experiment directory")
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


def run(args: argparse.Namespace) -> int:
    import json

    from dwtune.core.analysis import parse_pairs
    from dwtune.core.units import parse_size
    from dwtune.outputs.analysis import analyse, load_reference, parse_alpha, parse_window
    from dwtune.outputs.analysis_text import format_analysis
    from dwtune.storage.runs import load_runs, parse_columns

    mapping = parse_columns(args.columns)
    tokens = parse_size(args.tokens, field="--tokens") if args.tokens else None
    window = parse_window(args.window)
    alpha = parse_alpha(args.alpha)
    pairs = parse_pairs(args.pairs) if args.pairs else None
    ref = load_reference(args.reference)
    loaded = load_runs(args.runs, mapping, tokens)
    result = analyse(loaded, pairs=pairs, window=window, tokens=tokens, ref=ref, alpha=alpha)
    print(json.dumps(result, indent=2) if args.json else format_analysis(result))
    if args.report:
        from dwtune.outputs.analysis_report import write_analysis_report

        written = write_analysis_report(result, args.report)
        stream = __import__("sys").stderr if args.json else None
        print(f"report: {written[0]}", file=stream)
        for path in written[1:]:
            print(f"  {path}", file=stream)
    return 0
