"""The hostile-input suite: every generated case (tests/helpers/hostile_cases.py) ends cleanly.

Each case runs in-process through ``dwtune.cli.main`` on its own copy of one experiment built
once per session. Clean means: the expected exit code (2 for bad input), exactly one line on
stderr for an error, no traceback anywhere, and every finished trial record as it was.

The default run takes a stratified sample (every 5th case of each command and expected outcome);
the cases outside it are marked ``hostile`` and run with ``pytest -m hostile``.
"""

from __future__ import annotations

import collections

import pytest

from dwtune.cli import main
from tests.helpers.hostile_cases import EXP, all_cases
from tests.helpers.hostile_experiment import trials_digest

CASES = all_cases()
SAMPLE_EVERY = 5


def _stratified_sample(cases) -> set[str]:
    """Ids of every SAMPLE_EVERY-th case, counted within each (command, expected outcome), so
    that every command and every outcome keeps cases in the default run."""
    seen: collections.Counter = collections.Counter()
    picked = set()
    for case in cases:
        stratum = (case.command, case.expect)
        if seen[stratum] % SAMPLE_EVERY == 0:
            picked.add(case.id)
        seen[stratum] += 1
    return picked


SAMPLE = _stratified_sample(CASES)
PARAMS = [
    pytest.param(case, id=case.id, marks=() if case.id in SAMPLE else pytest.mark.hostile)
    for case in CASES
]


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse refuses a flag this way
        return int(exc.code or 0)


@pytest.mark.parametrize("case", PARAMS)
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
