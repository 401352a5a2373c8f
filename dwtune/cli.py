"""dwtune: how deep, how wide? Measure how Transformer language-model quality trades depth
against width at fixed parameter budgets (Levine et al. 2020), fit the law ln dx* = a + b·L and
project the optimal depth and width of larger models.

Each subcommand lives in ``dwtune/commands/<name>.py`` with ``add_arguments(parser)`` and
``run(args) -> int``. Command modules import heavy libraries (torch, ray, optuna, matplotlib)
inside ``run`` only, so ``dwtune plan`` and ``dwtune fit`` start in a fraction of a second.

Conventions every subcommand keeps: results on stdout (``--json``: one JSON document), progress
and diagnostics on stderr; bad input is one line per problem on stderr with exit code 2; a closed
pipe (``dwtune plan SPEC | head -1``) ends quietly with exit code 0; ``dwtune plan`` exits 3 when
``dwtune run`` would refuse the study (its ``--json`` lists the ``refusals``).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys
from typing import NoReturn

import shtab

from dwtune import __version__
from dwtune.core.errors import InputError, InputErrors

DESCRIPTION = """\
Measure how Transformer language-model quality trades depth against width at fixed
parameter budgets: train (or simulate) a grid of shapes, find where the deeper net starts to
win (N*), fit the transition law ln dx* = a + b·L and project the best depth and width for a
larger model."""
EPILOG = """\
examples:
  dwtune plan search_spaces/quickstart.yaml          every model a spec trains (no Ray, no torch)
  dwtune run search_spaces/simulated.yaml            a whole study on the simulated backend
  dwtune run SPEC train.steps=100 space.seeds=3      override spec keys (KEY=VALUE, YAML values)
  dwtune project --budget 175B                       optimal depth and width of a 175B model
  dwtune analyze runs.csv --json | jq .pairs         transitions in runs dwtune did not train

results go to stdout (--json: one JSON document), progress and diagnostics to stderr;
`dwtune COMMAND --help` describes a command;
shell completion: eval "$(dwtune --print-completion bash)" (or zsh, tcsh)."""

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

_CHOICE = re.compile(r"invalid choice: '(?P<got>[^']*)' \(choose from (?P<choices>.*)\)")
_UNRECOGNIZED = "unrecognized arguments: "


def did_you_mean(got: str, candidates: list[str]) -> str:
    """`` (did you mean 'plan'?)`` for the closest candidate, else ''."""
    close = difflib.get_close_matches(got, candidates, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


class _ArgumentParser(argparse.ArgumentParser):
    """argparse that reports bad flags as one line with exit code 2 (its default code), with
    the closest subcommand, choice or flag suggested (argparse before 3.14 suggests none)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}{self._suggestion(message)} (see --help)\n")

    def _suggestion(self, message: str) -> str:
        choice = _CHOICE.search(message)
        if choice:
            choices = re.findall(r"'([^']*)'", choice["choices"])
            return did_you_mean(choice["got"], choices)
        if message.startswith(_UNRECOGNIZED):
            flags = [f for f in self._option_string_actions if f.startswith("--")]
            for word in message.removeprefix(_UNRECOGNIZED).split():
                hint = did_you_mean(word.split("=")[0], flags) if word.startswith("-") else ""
                if hint:
                    return hint.replace("did you mean", f"{word}: did you mean")
        return ""


# Longest error line printed: messages cut what they echo (core.errors.shown); this is the
# backstop for one that does not, so a bad input never floods the terminal.
MAX_MESSAGE_CHARS = 1000


# Longest word (a key, a value, a path) an error line prints whole: a 5,000-character key
# named twice made a 1,040-character line; a path of a deep folder still fits.
MAX_WORD_CHARS = 160
WORD_HEAD, WORD_TAIL = 100, 40  # characters kept of a longer word, either side of "…"


def _elide(word: str) -> str:
    if len(word) <= MAX_WORD_CHARS:
        return word
    core = word.rstrip(":;,.")  # the sentence's punctuation stays after the count
    cut = f"{core[:WORD_HEAD]}…{core[-WORD_TAIL:]} ({len(core):,} characters)"
    return cut + word[len(core) :]


def one_line(message: str) -> str:
    """``message`` as one line of at most MAX_MESSAGE_CHARS characters, each word longer than
    MAX_WORD_CHARS cut in its middle."""
    text = " ".join(part.strip() for part in message.splitlines() if part.strip())
    text = " ".join(_elide(word) for word in text.split(" "))
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    return f"{text[:MAX_MESSAGE_CHARS]}… ({len(text):,} characters)"


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(
        prog="dwtune",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"dwtune {__version__}")
    # `eval "$(dwtune --print-completion bash)"` (or zsh, tcsh): completion scripts generated
    # from this very parser, so every command, flag and choice completes
    shtab.add_argument_to(parser, ["--print-completion"])
    subparsers = parser.add_subparsers(
        dest="command", required=True, parser_class=_ArgumentParser, metavar="COMMAND"
    )
    for name, help_text in COMMANDS.items():
        module = importlib.import_module(f"dwtune.commands.{name}")
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(sub)
        sub.set_defaults(_module=module, _parser=sub)
    return parser


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The parsed command line. ``KEY=VALUE`` words after a flag (``run SPEC --storage S
    train.steps=9``) are overrides too; any other unknown word is refused by its subcommand's
    parser, with the closest flag suggested."""
    args, extras = build_parser().parse_known_args(argv)
    if hasattr(args, "overrides"):
        overrides = [w for w in extras if "=" in w and not w.startswith("-")]
        args.overrides = [*args.overrides, *overrides]
        extras = [w for w in extras if w not in overrides]
    if extras:
        args._parser.error(f"{_UNRECOGNIZED}{' '.join(extras)}")
    return args


def main(argv: list[str] | None = None) -> int:
    if not (sys.argv[1:] if argv is None else argv):  # a bare `dwtune`: its help, not an error
        build_parser().print_help()
        return 0
    try:
        args = parse(argv)
    except SystemExit as exc:  # a refused flag (its one line is printed), --help, --version
        return exc.code if isinstance(exc.code, int) else 2
    except BrokenPipeError:  # `dwtune --help | head -1`, `--print-completion zsh | head`
        return closed_pipe()
    try:
        code = int(args._module.run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except InputErrors as exc:
        for error in exc.errors:
            print(f"dwtune {args.command}: error: {one_line(str(error))}", file=sys.stderr)
        return 2
    except InputError as exc:
        print(f"dwtune {args.command}: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return closed_pipe()
    except KeyboardInterrupt:
        print(f"dwtune {args.command}: interrupted; finished work is kept", file=sys.stderr)
        return 130


def closed_pipe() -> int:
    """The reader of stdout went away (``| head -1``): what it wanted was printed, so exit 0.
    stdout is pointed at /dev/null so that the interpreter's last flush does not fail again
    (https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
