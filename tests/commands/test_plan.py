"""dwtune plan: the table, --json, and that planning never starts Ray or imports torch."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dwtune.cli import main

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "search_spaces" / "paper.yaml"
# paper.yaml's dense grid: every depth at every one of its 16 budgets 2e6..1e10 (as shipped it
# uses the law design, whose first cells lie near each pair's N*)
PAPER_GRID = (str(PAPER), "refine.design=grid")


def test_plan_json_lists_every_cell_with_its_budget_error(capsys):
    assert main(["plan", *PAPER_GRID, "--json"]) == 3  # no corpus here: run would refuse
    plan = json.loads(capsys.readouterr().out)
    cells = plan["cells"]
    assert {c["depth"] for c in cells} == {6, 12, 18, 24, 30, 36, 48}
    assert len(cells) == 7 * 16
    for cell in cells:
        assert cell["width"] % cell["heads"] == 0
        assert cell["head_dim"] * cell["heads"] == cell["width"]
        assert cell["params_non_embedding"] == 12 * cell["depth"] * cell["width"] ** 2
        error = (cell["size"] - cell["budget"]) / cell["budget"]
        assert cell["budget_error_pct"] == pytest.approx(100 * error, abs=0.01)
        assert cell["within_tolerance"] == (abs(error) <= 0.02)
        assert (cell["regime"] == "above L_th") == (cell["depth"] > cell["depth_threshold"])


def test_paper_plan_meets_budgets_where_the_width_step_allows(capsys):
    """A cell may miss 2% only when both neighbouring legal widths miss by more."""
    assert main(["plan", str(PAPER), "--json"]) == 3
    for cell in json.loads(capsys.readouterr().out)["cells"]:
        if cell["within_tolerance"]:
            continue
        step = 16  # lcm(heads=2, width_multiple=16) in paper.yaml
        for width in (cell["width"] - step, cell["width"] + step):
            size = 12 * cell["depth"] * width**2
            assert abs(size - cell["budget"]) / cell["budget"] > 0.02


def test_plan_table_is_readable_and_flags_missed_budgets(capsys):
    assert main(["plan", str(ROOT / "search_spaces" / "quickstart.yaml")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("quickstart:")
    assert out[2].startswith("refine design: grid (")
    assert "12·L·dx²" in out[3] and "L_th" in out[3]
    assert max(len(line) for line in out[2:-1]) < 120


def test_plan_names_the_refine_design_and_why(capsys):
    """The header's refine line and ``--json``'s ``refine`` agree with the design the spec
    names: the grid for a dense grid, the law (paper.yaml as shipped), none without pairs."""
    assert main(["plan", *PAPER_GRID]) == 3
    grid = capsys.readouterr().out.splitlines()[2]
    assert grid.startswith("refine design: grid (every depth at every space.budgets")
    assert "second sign change" in grid
    assert main(["plan", *PAPER_GRID, "--json"]) == 3
    refine = json.loads(capsys.readouterr().out)["refine"]
    assert refine == {
        "design": "grid",
        "summary": grid[len("refine design: grid (") : -1],
        "pairs": 6,
    }

    assert main(["plan", str(PAPER), "refine.reach=0.5"]) == 3
    law = capsys.readouterr().out.splitlines()[2]
    assert law.startswith("refine design: law (each pair's first sizes at levine2020's N*·e^(±0.5)")
    assert "blind to a second sign change" in law
    assert main(["plan", str(PAPER), "--json"]) == 3
    refine = json.loads(capsys.readouterr().out)["refine"]
    assert refine["design"] == "law" and refine["pairs"] == 6
    assert "N*·e^(±0.35)" in refine["summary"]

    tiny = str(ROOT / "search_spaces" / "tiny_lr.yaml")
    assert main(["plan", tiny]) == 0
    assert capsys.readouterr().out.splitlines()[2].startswith("refine: none")
    assert main(["plan", tiny, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["refine"] is None


def test_simulated_plan_is_labelled_simulated(capsys):
    assert main(["plan", str(ROOT / "search_spaces" / "simulated.yaml")]) == 0
    assert "SIMULATED" in capsys.readouterr().out.splitlines()[0]


PURE_MODULES = [
    "core.spec",
    "core.budget",
    "core.records",
    "core.units",
    "core.vocabulary",
    "core.refine.steps",
    "core.refine.transition",
    "core.fit",
    "core.projection",
    "core.oracle_floor",
    "storage.store",
    "backends.simulated",
]
# One fresh interpreter imports each module in turn, then plans. sys.modules only grows, so a
# module that loads a heavy library shows it at its own step and at every step after it.
PURE_IMPORT_CHECK = """
import contextlib, importlib, io, json, sys
HEAVY = ("torch", "ray", "optuna", "matplotlib")
loaded = {{}}
for module in {modules!r}:
    importlib.import_module("dwtune." + module)
    loaded[module] = sorted(m for m in HEAVY if m in sys.modules)
from dwtune.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    main({argv!r})
loaded["plan"] = sorted(m for m in HEAVY if m in sys.modules)
print(json.dumps(loaded))
"""


@pytest.fixture(scope="module")
def heavy_loaded() -> dict[str, list[str]]:
    """step -> the heavy libraries in sys.modules after it (the pure modules, then plan)."""
    code = PURE_IMPORT_CHECK.format(modules=PURE_MODULES, argv=["plan", str(PAPER), "--json"])
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_modules_and_plan_import_no_torch_ray_or_optuna(module, heavy_loaded):
    assert heavy_loaded[module] == []
    assert heavy_loaded["plan"] == []


# --------------------------------------------------------------------------- sharded trials

QUICKSTART = ROOT / "search_spaces" / "quickstart.yaml"


def test_plan_exits_2_on_a_fractional_gpu_for_a_sharded_trial(capsys):
    argv = ["plan", str(QUICKSTART), "resources.workers_per_trial=2", "resources.gpu=0.5"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "resources.gpu: got 0.5 with workers_per_trial 2" in err[0]


def test_plan_json_and_table_show_the_workers_of_each_cell(capsys):
    assert main(["plan", str(QUICKSTART), "--json"]) == 0
    assert {c["workers"] for c in json.loads(capsys.readouterr().out)["cells"]} == {1}
    assert main(["plan", str(QUICKSTART)]) == 0
    assert "workers" not in capsys.readouterr().out  # no column when nothing shards

    assert main(["plan", str(QUICKSTART), "resources.workers_per_trial=2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[3].split()
    assert header[-4:] == ["regime", "workers", "mbatch", "fused"]
    rows = [line.split() for line in lines[4:10]]
    # workers, mbatch, fused ("below L_th": 2 words); on CPU every trial shards: none fuses
    assert all(row[-3] == "2" and row[-1] == "1" for row in rows)
    assert "6 of 6 cells shard each trial over its workers" in "\n".join(lines)


def test_paper_scale_shards_only_the_cells_one_gpu_cannot_hold(capsys):
    """paper.yaml's dense grid (resources.workers_per_trial 8) on 80 GB GPUs: one GPU where it
    holds a trial (whole or in micro-batches); the rest over the fewest workers, each in
    micro-batches; every cell fits (the law design reaches these sizes where it widens)."""
    assert main(["plan", *PAPER_GRID, "--device", "h100", "--json"]) == 3  # no corpus here
    plan = json.loads(capsys.readouterr().out)
    assert [r["reason"] for r in plan["refusals"]] == ["corpus_missing"]
    cells = {(c["depth"], c["budget"]): c for c in plan["cells"]}
    assert all(c["fits"] for c in cells.values())
    smallest, largest = min(b for _, b in cells), max(b for _, b in cells)
    assert cells[(6, smallest)]["workers"] == 1 and cells[(6, smallest)]["accumulation"] == 1
    big = cells[(48, largest)]  # 10B parameters: its AdamW state alone exceeds a GPU
    assert big["workers"] in (2, 4, 8) and big["accumulation"] > 1
    assert big["micro_batch"] * big["accumulation"] >= 512 // big["workers"]
    for cell in cells.values():
        if cell["workers"] > 1:  # sharded only where its weights leave one GPU no room
            assert 18 * cell["params_total"] > 0.9 * 80 * 2**30
    assert set(c["workers"] for c in cells.values()) <= {1, 2, 4, 8}
    assert plan["packing"]["cells_too_big"] == 0
    assert plan["packing"]["cells_sharded"] == sum(c["workers"] > 1 for c in cells.values()) > 0


def test_plan_says_how_many_seeds_each_trial_fuses(capsys):
    assert main(["plan", str(QUICKSTART), "--json"]) == 0
    cells = json.loads(capsys.readouterr().out)["cells"]
    assert {c["fused_seeds"] for c in cells} == {1}  # CPU: fusing measured no faster
    assert main(["plan", str(QUICKSTART), "resources.fuse_seeds=always", "--json"]) == 0
    cells = json.loads(capsys.readouterr().out)["cells"]
    assert {c["fused_seeds"] for c in cells} == {2}  # a cell's two seeds, one model
    assert main(["plan", *PAPER_GRID, "--device", "h100", "--json"]) == 3  # no corpus here
    cells = json.loads(capsys.readouterr().out)["cells"]
    assert all(c["fused_seeds"] == 1 for c in cells if c["workers"] > 1)
    assert any(c["fused_seeds"] == 3 for c in cells)  # small cells: all three seeds


def test_plan_header_and_cost_table_count_the_same_trainings(capsys):
    """The table lists the cells planned before any result; its header says so, and with
    --cost names the whole study's trainings, as the cost table's total row does."""
    assert main(["plan", str(PAPER)]) == 3
    header = capsys.readouterr().out.splitlines()[0]
    assert "= 75 first trainings (the refine stage adds more: --cost estimates them)" in header
    assert main(["plan", str(PAPER), "--cost"]) == 3
    lines = capsys.readouterr().out.splitlines()
    total = next(line.split()[1] for line in lines if line.startswith("total "))
    assert f"= 75 first trainings, about {total} in all with refine;" in lines[0]
