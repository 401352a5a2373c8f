"""No file outside the experiment is written through a link planted in it.

For every file a study writes in its experiment folder, a hard link and a symlink to a file
outside the folder are put at its name; the whole study is rerun in-process (``run --runner
local``: grid reused, refine, export, fit, report) and the outside file's bytes must be as they
were. The run either replaces the link by a file of its own (the atomic writers do) or refuses
it in one line naming the fix.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dwtune.cli import main
from tests.helpers.hostile_cases import EXP, SPEC

pytestmark = pytest.mark.hostile

OUTSIDE_BYTES = b"a file of the user's, outside the experiment\n"
# Every file a study writes directly in its experiment folder (tb/ event files and Ray's own
# run folders have names no one can plant ahead).
WRITTEN = (
    "spec.yaml",
    ".driver.lock",
    "trials.parquet",
    "curves.parquet",
    "transitions.parquet",
    "pair_deltas.parquet",
    "projections.parquet",
    "fit.json",
    "report.md",
    "figures/1_loss_vs_size.png",
    "figures/2_delta_per_pair.png",
    "figures/3_fit_width_vs_depth.png",
    "figures/4_projection.png",
    "figures/5_loss_curves.png",
    "refine/6-12.journal",
    "trials/RECORD",  # the first trial record
)


def _plant(inside: Path, outside: Path, kind: str) -> None:
    """``inside`` made a hard link or a symlink to ``outside`` (its content copied there first,
    so that a run that refuses nothing still reads what it expects)."""
    outside.write_bytes(inside.read_bytes() if inside.exists() else OUTSIDE_BYTES)
    inside.unlink(missing_ok=True)
    if kind == "hard":
        os.link(outside, inside)
    else:
        inside.symlink_to(outside)


def _run(root: Path) -> int:
    argv = ["run", str(root / SPEC), "--storage", str(root / EXP.parent), "--runner", "local"]
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.mark.parametrize("kind", ["hard", "symbolic"])
@pytest.mark.parametrize("name", WRITTEN)
def test_a_linked_file_is_never_written_through(experiment, tmp_path, capsys, name, kind):
    if name == "trials/RECORD":
        name = f"trials/{sorted((experiment / EXP / 'trials').glob('*.json'))[0].name}"
    inside, outside = experiment / EXP / name, tmp_path / "outside" / Path(name).name
    outside.parent.mkdir()
    _plant(inside, outside, kind)
    before = outside.read_bytes()
    code = _run(experiment)
    out, err = capsys.readouterr()
    assert outside.read_bytes() == before
    assert "Traceback" not in out + err
    if code != 0:
        assert code == 2 and len(err.strip().splitlines()) == 1, err
