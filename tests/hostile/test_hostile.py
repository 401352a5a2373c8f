"""The hostile-input suite: every generated case ends cleanly (see cases.py).

Each case runs in-process through ``dwtune.cli.main`` on its own copy of one experiment built
once per session. Clean means: the expected exit code (2 for bad input), exactly one line on
stderr for an error, no traceback anywhere, and every finished trial record as it was.
"""

from __future__ import annotations

import collections

import pytest

from dwtune.cli import main
from tests.helpers.hostile_cases import EXP, all_cases
from tests.helpers.hostile_experiment import trials_digest

CASES = all_cases()


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse refuses a flag this way
        return int(exc.code or 0)


def test_the_suite_covers_every_command_with_enough_cases():
    per_command = collections.Counter(case.command for case in CASES)
    print(dict(sorted(per_command.items())))
    assert len(CASES) >= 150
    assert set(per_command) >= {
        "plan",
        "fit",
        "project",
        "report",
        "refine",
        "export",
        "run",
        "train",
        "bench",
    }
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_input_ends_cleanly(case, experiment, capsys):
    case.setup(experiment)
    trials = experiment / EXP / "trials"
    before = trials_digest(trials)
    code = _exit_code(case.argv(experiment))
    out, err = capsys.readouterr()
    assert "Traceback" not in err + out
    if case.expect == "error" or (case.expect == "any" and code != 0):
        assert code == 2, (code, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert case.says in lines[0]
    else:
        assert code == 0, err
    after = trials_digest(trials)
    assert {name: after.get(name) for name in before} == before  # no finished record changed
