"""Command-line entry point.

Each subcommand lives in ``dwtune/commands/<name>.py`` with ``add_arguments(parser)`` and
``run(args) -> int``. Command modules import heavy libraries (torch, ray, optuna, matplotlib)
inside ``run`` only, so ``dwtune plan`` and ``dwtune fit`` start in a fraction of a second.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from dwtune import __version__
from dwtune.core.errors import InputError

# name -> one-line help; the module dwtune.commands.<name> implements it.
COMMANDS = {
    "plan": "show every model a spec will train (no Ray, no torch)",
    "prepare": "tokenize a spec's corpus into the token cache (streaming, resumable)",
    "train": "train one model in-process with a progress bar",
    "bench": "time training steps for one shape (tokens/s, MFU, memory)",
    "run": "run a study: grid stage, refine stage, fit and report",
    "refine": "run or resume the refine stage of an experiment",
    "export": "write trials.parquet and curves.parquet for an experiment",
    "fit": "fit ln dx* = a + b*L to transitions",
    "project": "project the optimal depth and width for a budget",
    "report": "write report.md and figures for an experiment",
    "analyze": "find transitions in a table of runs dwtune did not train; hold a law against it",
    "coordcheck": "activation RMS per layer across widths under sp, mup, completep",
}


class _ArgumentParser(argparse.ArgumentParser):
    """argparse that reports bad flags as one line with exit code 2 (its default code)."""

    def error(self, message: str) -> None:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


# Longest error line printed: messages cut what they echo (core.errors.shown); this is the
# backstop for one that does not, so a bad input never floods the terminal.
MAX_MESSAGE_CHARS = 1000


def one_line(message: str) -> str:
    """``message`` as one line of at most MAX_MESSAGE_CHARS characters."""
    text = " ".join(part.strip() for part in message.splitlines() if part.strip())
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    return f"{text[:MAX_MESSAGE_CHARS]}… ({len(text):,} characters)"


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(prog="dwtune", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"dwtune {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser)
    for name, help_text in COMMANDS.items():
        module = importlib.import_module(f"dwtune.commands.{name}")
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(sub)
        sub.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # a refused flag (its one line is printed), --help, --version
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return int(args._module.run(args) or 0)
    except InputError as exc:
        print(f"dwtune {args.command}: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"dwtune {args.command}: interrupted; finished work is kept", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
