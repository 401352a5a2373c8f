"""argparse value types with the documented limits (dwtune.core.spec.limits).

A flag out of range is refused by argparse itself: one line, exit code 2, before any work.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping

import shtab

from dwtune.core.errors import shown
from dwtune.core.spec import limits
from dwtune.core.vocabulary import Runner


def whole(low: int, high: int):
    """An integer flag in ``low..high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"got {shown(text)}; expected a whole number"
            ) from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"got {value}; expected {low} <= n <= {high}")
        return value

    parse.__name__ = "whole number"  # argparse names the type in its message
    return parse


def number(low: float, high: float, *, low_open: bool = False):
    """A finite float flag in ``[low, high]`` (``(low, high]`` when ``low_open``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {shown(text)}; expected a number") from None
        above_low = value > low if low_open else value >= low
        if not (math.isfinite(value) and above_low and value <= high):
            bound = "<" if low_open else "<="
            expected = f"{low:g} {bound} x <= {high:g}"
            raise argparse.ArgumentTypeError(f"got {shown(value)}; expected {expected}")
        return value

    parse.__name__ = "number"
    return parse


DEPTH = whole(1, limits.MAX_DEPTH)
WIDTH = whole(1, limits.MAX_WIDTH)
HEADS = whole(1, limits.MAX_HEADS)
SEQ_LEN = whole(2, limits.MAX_SEQ_LEN)
BATCH = whole(1, limits.MAX_BATCH_SIZE)
VOCAB = whole(2, limits.MAX_VOCAB)
STEPS = whole(1, limits.MAX_STEPS)
WARMUP = whole(0, limits.MAX_STEPS)
SEED = whole(0, limits.MAX_SEED)
SEED_COUNT = whole(1, limits.MAX_SEEDS)
MLP_RATIO = number(0.0, limits.MAX_MLP_RATIO, low_open=True)
PEAK_FLOPS = number(0.0, 1e21, low_open=True)  # FLOP/s; the fastest chips are ~1e15-1e16
LEVEL = number(0.0, 1.0, low_open=True)


OVERRIDES_HELP = (
    "spec keys to override, KEY=VALUE with a YAML value, e.g. train.steps=100 space.seeds=3 "
    "name=quick (checked as the same keys in the file; the experiment stores the resolved spec)"
)


# What a path argument completes to in the shell (`dwtune --print-completion bash`): FILE offers
# files and folders (a folder leads to a file; RUNS is either), DIRECTORY folders only.
FILE, DIRECTORY = shtab.FILE, shtab.DIRECTORY


def completes(action: argparse.Action, kind: Mapping[str, object]) -> argparse.Action:
    """``action`` marked for shtab to complete paths of ``kind`` (FILE or DIRECTORY)."""
    action.complete = kind  # type: ignore[attr-defined]  # read by shtab, unknown to argparse
    return action


def add_spec(parser: argparse.ArgumentParser, help: str) -> None:
    """The SPEC positional and its ``KEY=VALUE`` overrides (``args.spec``, ``args.overrides``)."""
    completes(parser.add_argument("spec", metavar="SPEC", help=help), FILE)
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=OVERRIDES_HELP)


def add_runner(parser: argparse.ArgumentParser) -> None:
    """``--runner``: where the trials train (``args.runner``)."""
    parser.add_argument(
        "--runner",
        choices=[runner.value for runner in Runner],
        default=Runner.RAY.value,
        help="ray: trials in parallel on Ray Tune (default); local: in this process, one after "
        "another, no Ray (the simulated backend, small studies)",
    )


def add_verbosity(parser: argparse.ArgumentParser) -> None:
    """``-q/--quiet`` and ``-v/--verbose`` (``args.verbosity``: 0, 1 or 2)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "-q",
        "--quiet",
        dest="verbosity",
        action="store_const",
        const=0,
        help="no progress display; warnings (failures, retries) and the answer only",
    )
    group.add_argument(
        "-v",
        "--verbose",
        dest="verbosity",
        action="store_const",
        const=2,
        help="also a line per finished trial, and debug diagnostics",
    )
    parser.set_defaults(verbosity=1)
