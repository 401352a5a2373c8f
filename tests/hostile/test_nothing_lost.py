"""Nothing lost, nothing silent: the cases that once lost results or failed quietly.

Each case damages a copy of the built experiment (or writes a hostile input), runs one command
in-process and asserts: exit code 2; exactly one line in all output, read at the file
descriptors (LAPACK prints to fd 1 from C) with no Python warning raised; the line says what it
must; and trials.parquet and every record are as they were (row counts before and after).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from dwtune.cli import main
from tests.helpers.hostile_cases import EXP, SPEC
from tests.helpers.hostile_experiment import trials_digest

pytestmark = pytest.mark.hostile
MAX_LINE = 400  # characters, with the temporary folder written as <tmp> (its length is the host's)


@dataclasses.dataclass(frozen=True)
class Lost:
    id: str
    setup: Callable[[Path], None]
    argv: Callable[[Path], list[str]]
    says: str


def _trials(root: Path) -> Path:
    return root / EXP / "trials"


def _record(root: Path) -> Path:
    return sorted(_trials(root).glob("*.json"))[0]


def _trials_a_file(root: Path) -> None:
    shutil.rmtree(_trials(root))
    _trials(root).write_text("not a folder")


def _trials_elsewhere(root: Path, keep: int) -> None:
    """trials/ becomes a link to a folder outside the experiment holding ``keep`` records."""
    outside = root / "outside"
    outside.mkdir()
    for path in sorted(_trials(root).glob("*.json"))[:keep]:
        shutil.copy(path, outside / path.name)
    shutil.rmtree(_trials(root))
    _trials(root).symlink_to(outside)


def _record_elsewhere(root: Path) -> None:
    record = _record(root)
    (root / "elsewhere").mkdir()
    moved = shutil.move(record, root / "elsewhere" / record.name)
    record.symlink_to(moved)


def _text(name: str, text: str) -> Callable[[Path], None]:
    return lambda root: (root / name).write_text(text)


def _spec_with(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        raw = yaml.safe_load((root / SPEC).read_text())
        change(raw)
        (root / "odd.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))

    return setup


def _export(root: Path) -> list[str]:
    return ["export", str(root / EXP)]


def _run(spec: str) -> Callable[[Path], list[str]]:
    return lambda root: ["run", str(root / spec), "--storage", str(root / "experiments")]


FIT = {"status": "fitted", "a": 1000.0, "b": 0.05, "cov": [[0.01, 0.0], [0.0, 0.0001]]}
TRANSITIONS = "depth,width,width_err\n6,300,{e}\n12,560,{e}\n18,1100,{e}\n"
RUNS = "depth,width,params,loss,step\n"

CASES = [
    Lost("export-trials-a-file", _trials_a_file, _export, "trials: not a folder"),
    Lost(
        "export-trials-linked-outside",
        lambda root: _trials_elsewhere(root, keep=1),
        _export,
        "outside the experiment",
    ),
    Lost(
        "export-trials-removed",
        lambda root: shutil.rmtree(_trials(root)),
        _export,
        "trials and the records hold 0,",
    ),
    Lost("export-record-linked-outside", _record_elsewhere, _export, "outside the experiment"),
    Lost(
        "run-trials-linked-outside",
        lambda root: _trials_elsewhere(root, keep=0),
        _run(str(SPEC)),
        "outside the experiment",
    ),
    Lost("run-record-linked-outside", _record_elsewhere, _run(str(SPEC)), "outside the experiment"),
    Lost(
        "analyze-10mb-cell",
        _text("runs.csv", "depth,width,params,loss\n" + "x" * 10**7 + ",64,1e6,3.1\n"),
        lambda root: ["analyze", str(root / "runs.csv")],
        "(10,000,002 characters); expected a number",
    ),
    Lost(
        "fit-huge-number",
        _text("in.csv", "depth,width,width_err\n6," + "9" * 5000 + ",1\n12,560,30\n"),
        lambda root: ["fit", str(root / "in.csv")],
        "(5,002 characters); expected a number",
    ),
    Lost(
        "fit-tiny-sigma",
        _text("in.csv", TRANSITIONS.format(e="1e-300")),
        lambda root: ["fit", str(root / "in.csv")],
        "width_err at in.csv row 1: got 1e-300",
    ),
    Lost(
        "fit-subnormal-sigma",  # once LAPACK's DLASCL lines on stdout, then an SVD error
        _text("in.csv", TRANSITIONS.format(e="1e-320")),
        lambda root: ["fit", str(root / "in.csv")],
        "expected at least 1e-06 of the width",
    ),
    Lost(
        "project-tiny-sigma",
        _text("in.csv", TRANSITIONS.format(e="1e-300")),
        lambda root: ["project", "--fit", str(root / "in.csv"), "--budget", "175B"],
        "width_err at in.csv row 1",
    ),
    Lost(
        "project-a-1000",
        _text("fit.json", json.dumps(FIT)),
        lambda root: ["project", "--fit", str(root / "fit.json"), "--budget", "175B"],
        "its numbers cannot be used (FloatingPointError: divide by zero",
    ),
    Lost(
        "plan-unknown-simulated-key",
        _spec_with(lambda raw: raw["simulated"].update(zzz=1)),
        lambda root: ["plan", str(root / "odd.yaml")],
        "simulated.zzz: unknown key; closest valid keys: ",
    ),
    Lost(
        "run-name-help",
        _spec_with(lambda raw: raw.update(name="--help")),
        _run("odd.yaml"),
        "name: got '--help'; expected letters",
    ),
    Lost(
        "analyze-depth-6.5",
        _text("runs.csv", "depth,width,params,loss\n6.5,64,1e6,3.2\n12,64,2e6,3.3\n"),
        lambda root: ["analyze", str(root / "runs.csv")],
        "column depth row 1: got 6.5; expected a whole number of layers",
    ),
    Lost(
        "analyze-conflicting-duplicates",
        _text("runs.csv", RUNS + "6,64,1e6,3.2,100\n6,64,1e6,4.9,100\n12,64,2e6,3.3,100\n"),
        lambda root: ["analyze", str(root / "runs.csv")],
        "rows 1 and 2 are one run (depth 6, params 1e+06) at step 100 with losses 3.2 and 4.9",
    ),
]


def _rows(path: Path) -> int | None:
    return pq.read_metadata(path).num_rows if path.is_file() else None


def _state(root: Path) -> tuple:
    """What must survive a refused command: the table's rows, every record, the outside copy."""
    table = root / EXP / "trials.parquet"
    return _rows(table), trials_digest(_trials(root)), trials_digest(root / "outside")


def _run_cli(argv: list[str], capfd) -> tuple[int, list[str]]:
    """Exit code and every non-empty line written to fd 1 or 2; a Python warning fails."""
    capfd.readouterr()  # what the session's experiment printed as it was built
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning would have spilled onto the console
        code = main(argv)
    out, err = capfd.readouterr()
    return code, [line for line in (out + err).splitlines() if line.strip()]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_refused_in_one_line_and_nothing_lost(case, experiment, capfd, tmp_path_factory):
    case.setup(experiment)
    before = _state(experiment)
    code, lines = _run_cli(case.argv(experiment), capfd)
    assert (code, len(lines)) == (2, 1), lines
    shown = lines[0].replace(str(tmp_path_factory.getbasetemp()), "<tmp>")
    assert case.says in lines[0] and len(shown) < MAX_LINE, shown
    assert "Traceback" not in lines[0]
    assert _state(experiment) == before
    assert before[0] > 0  # the table was there to lose
    assert not (experiment / "experiments" / "--help").exists()


def _chattr(flag: str, path: Path) -> bool:
    done = subprocess.run(["chattr", flag, str(path)], capture_output=True)
    return done.returncode == 0


def test_an_immutable_trials_folder_gets_advice_that_clears_the_attribute(experiment, capfd):
    trials = _trials(experiment)
    if shutil.which("chattr") is None or not _chattr("+i", trials):
        pytest.skip("cannot set the immutable attribute here (needs root and ext4/xfs/btrfs)")
    try:
        before = _state(experiment)
        code, lines = _run_cli(_run(str(SPEC))(experiment), capfd)
    finally:
        _chattr("-i", trials)
    assert (code, len(lines)) == (2, 1), lines
    assert f"it has the immutable attribute: clear it (chattr -i {trials})" in lines[0]
    assert _state(experiment) == before
