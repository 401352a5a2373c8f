"""dwtune prepare SPEC: tokenize the spec's corpus into the token cache, and nothing else.

On a cluster, run it once on a node that mounts the shared cache folder before ``dwtune run``:
trials then only memory-map the token files. Interrupted (Ctrl-C, killed), it resumes from its
last commit when run again; a second run on a prepared corpus is a cache hit.
"""

from __future__ import annotations

import argparse
import json
import time

from dwtune.commands import argtypes
from dwtune.core.errors import InputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    argtypes.add_spec(parser, "experiment spec, e.g. search_spaces/paper.yaml")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="encoding processes (default: the cores this process may use)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bars (they go to stderr)"
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="hash every token file of a prepared entry against its manifest and rebuild a "
        "damaged one (opening an entry hashes only files changed since their last check)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")


def summary(prepared, elapsed_s: float) -> dict:
    """What was prepared, from the entry's manifest; throughput only for a fresh build."""
    meta = json.loads((prepared.directory / "manifest.json").read_text())
    result = {
        "cache_hit": prepared.cache_hit,
        "entry": str(prepared.directory),
        "tokenizer": f"{meta['tokenizer']}-{meta['vocab_size']}",
        "dtype": meta["dtype"],
        "text_bytes": meta["text_bytes"],
        "train_tokens": meta["train_tokens"],
        "val_tokens": meta["val_tokens"],
        "elapsed_s": round(elapsed_s, 2),
    }
    if not prepared.cache_hit:
        result["mb_per_s"] = round(meta["text_bytes"] / 1e6 / max(elapsed_s, 1e-9), 2)
    return result


def run(args: argparse.Namespace) -> int:
    from dwtune.backends.data import prepare_corpus
    from dwtune.core.spec import load_spec

    if args.workers is not None and args.workers < 1:
        raise InputError(f"--workers: got {args.workers}; expected an integer >= 1")
    spec = load_spec(args.spec, args.overrides)
    started = time.monotonic()
    prepared = prepare_corpus(
        spec.data, workers=args.workers, progress=not args.no_progress, verify=args.verify
    )
    result = summary(prepared, time.monotonic() - started)
    if args.json:
        print(json.dumps({"corpus": spec.data.corpus, **result}, indent=2))
        return 0
    state = "cache hit" if result["cache_hit"] else f"prepared at {result['mb_per_s']} MB/s"
    state += " (verified)" if args.verify and result["cache_hit"] else ""
    print(
        f"{spec.data.corpus}: {state}; {result['text_bytes'] / 1e6:,.1f} MB of text -> "
        f"{result['train_tokens']:,} training + {result['val_tokens']:,} held-out tokens "
        f"({result['tokenizer']}, {result['dtype']}) in {result['elapsed_s']} s\n"
        f"entry: {result['entry']}"
    )
    return 0
