"""dwtune plan / run scale guards, coverage warnings, packing and --cost."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from dwtune.cli import main
from dwtune.study import planning

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "search_spaces" / "paper.yaml"
QUICKSTART = ROOT / "search_spaces" / "quickstart.yaml"


def spec_file(tmp_path, base: Path, **sections) -> str:
    raw = yaml.safe_load(base.read_text())
    for key, values in sections.items():
        raw[key] = {**raw.get(key, {}), **values}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_quickstart_on_the_plays_at_the_papers_length_is_refused(tmp_path, capsys):
    spec = spec_file(tmp_path, QUICKSTART, train={"steps": 1_000_000, "batch_size": 512})
    assert main(["plan", spec]) == planning.REFUSED_EXIT == 3  # planned, but run would refuse
    captured = capsys.readouterr()
    assert captured.err == ""
    why = [line for line in captured.out.splitlines() if "too_many_epochs" in line]
    assert len(why) == 1 and why[0].startswith("  too_many_epochs (data.corpus): data.corpus:")
    seq_len = yaml.safe_load(QUICKSTART.read_text())["data"]["seq_len"]
    assert f"{1_000_000 * 512 * seq_len:.2e} tokens (1,000,000 steps x 512 x {seq_len})" in why[0]
    assert "above data.max_epochs = 4" in why[0] and "train.steps <= " in why[0]
    assert main(["plan", spec, "--json"]) == 3
    plan = json.loads(capsys.readouterr().out)
    assert plan["runnable"] is False and len(plan["refusals"]) == 1
    refusal = plan["refusals"][0]
    assert (refusal["reason"], refusal["field"]) == ("too_many_epochs", "data.corpus")
    assert refusal["message"] == why[0].split(": ", 1)[1]  # the line `dwtune run` prints
    assert main(["plan", str(QUICKSTART), "--json"]) == 0  # it reads < 1 epoch
    assert json.loads(capsys.readouterr().out)["refusals"] == []


def test_run_refuses_before_anything_is_written(tmp_path, capsys):
    spec = spec_file(tmp_path, QUICKSTART, train={"steps": 1_000_000, "batch_size": 512})
    assert main(["run", spec, "--storage", str(tmp_path / "exp")]) == 2
    assert "above data.max_epochs" in capsys.readouterr().err
    assert not (tmp_path / "exp").exists()
    missing = spec_file(tmp_path, QUICKSTART, data={"corpus": str(tmp_path / "none")})
    assert main(["run", missing, "--storage", str(tmp_path / "exp")]) == 2
    assert "dwtune prepare SPEC" in capsys.readouterr().err
    assert not (tmp_path / "exp").exists()
    assert main(["prepare", missing]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dwtune prepare: error: data.corpus: ") and "\n" not in err
    assert "does not exist" in err and "download a web corpus" in err
    assert main(["plan", missing]) == 3  # the plan still plans, says so, and exits 3
    out = capsys.readouterr().out
    assert "corpus MISSING" in out and "  corpus_missing (data.corpus): data.corpus: " in out


def test_a_prepared_corpus_is_counted_from_its_manifest(tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("to be or not to be, that is the question\n" * 4000)
    cache = str(tmp_path / "cache")
    data = {"corpus": str(corpus), "cache_dir": cache}
    spec = spec_file(tmp_path, QUICKSTART, data=data, train={"steps": 100})
    assert main(["plan", spec]) == 0
    assert "estimate from 0.2 MB on disk" in capsys.readouterr().out
    assert main(["prepare", spec, "--no-progress"]) == 0
    assert "prepared at" in capsys.readouterr().out
    assert main(["prepare", spec, "--no-progress"]) == 0
    assert "cache hit" in capsys.readouterr().out
    assert main(["plan", spec, "--json"]) == 0
    corpus_info = json.loads(capsys.readouterr().out)["corpus"]
    assert corpus_info["exact"] and corpus_info["source"] == "prepared manifest"
    assert round(corpus_info["train_tokens"], -3) == 1.48e5  # 0.9 x 163,999 chars


def web_corpus(tmp_path: Path, gigabytes: float) -> str:
    """A folder holding one sparse .txt file of that size: the plan reads its size on disk
    (no text), as it would a downloaded web corpus before `dwtune prepare`."""
    folder = tmp_path / "web"
    folder.mkdir()
    with open(folder / "part-0.txt", "wb") as handle:
        handle.truncate(int(gigabytes * 1e9))
    return str(folder)


@pytest.mark.slow  # --cost simulates the paper's refine stage
def test_paper_plan_fits_every_cell_and_runs_with_its_corpus(tmp_path, monkeypatch, capsys):
    """`dwtune plan search_spaces/paper.yaml --cost --device h100 --gpus 64`: exit 0 with a
    corpus in place (every cell fits; the dense grid's sharded ones too), exit 3 without it."""
    monkeypatch.setattr(planning, "BENCH_RESULTS", tmp_path / "no_bench.jsonl")
    argv = ["plan", str(PAPER), "--cost", "--device", "h100", "--gpus", "64"]
    corpus = f"data.corpus={web_corpus(tmp_path, 60)}"  # 1.96e10 tokens; 4 epochs need 1.64e10
    assert main([*argv, corpus]) == 0
    out = capsys.readouterr().out
    assert "DOES NOT FIT" not in out and "`dwtune run` would refuse" not in out
    # the law design's first cells, in 90% of the H100's reported 79.65 GiB
    assert "  25 of 25 cells fit their 71.7 GiB share" in out
    assert main([*argv, corpus, "refine.design=grid"]) == 0  # every budget up to 1e10
    out = capsys.readouterr().out
    assert "DOES NOT FIT" not in out and "  112 of 112 cells fit their 71.7 GiB share" in out
    sharded = next(line for line in out.splitlines() if "cells shard each trial" in line)
    assert int(sharded.split()[0]) > 0
    assert "wall hours: a sharded trial holds its workers' GPUs (up to " in out
    assert "  sharded workers (FSDP2: bf16 parameters, fp32 reduction; no autocast copy)" in out
    assert "  checkpoints add no GPU memory: one-GPU trials load through host memory" in out
    # without the corpus: the documented refusal code, for that reason only (priced as above:
    # test_paper_plan_costs_the_study_without_its_corpus)
    assert main(["plan", str(PAPER), "--device", "h100", "--json"]) == planning.REFUSED_EXIT
    refusals = json.loads(capsys.readouterr().out)["refusals"]
    assert [r["reason"] for r in refusals] == ["corpus_missing"]


@pytest.mark.slow  # --cost simulates the paper's refine stage
def test_paper_plan_costs_the_study_without_its_corpus(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(planning, "BENCH_RESULTS", tmp_path / "no_bench.jsonl")
    # planned and costed, but run would refuse it: no corpus here
    assert main(["plan", str(PAPER), "--cost", "--device", "h100", "--gpus", "64"]) == 3
    out = capsys.readouterr().out
    assert "corpus MISSING" in out and "warning: pair" not in out  # budgets bracket every N*
    assert "x MFU 30% (ASSUMED" in out and "on 64 GPU(s)" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    grid, refine, total = rows["grid"], rows["refine"], rows["total"]
    # the law design's first cells in the grid stage: the first wave's three pairs' two depths
    # at two sizes, the shallowest depth at its pair's N* too, 3 seeds each; the second
    # wave's first points are refine trainings, placed by the fit on the first wave
    assert int(grid[1]) == (3 * 2 * 2 + 1) * 3 and int(refine[1]) > 0
    assert "refine.waves 2: the grid stage trains pairs 6-12, 12-18, 18-24;" in out
    hours = [float(r[3].replace(",", "")) for r in (grid, refine, total)]
    assert abs(hours[0] + hours[1] - hours[2]) <= 0.11
    wall = [float(r[4].replace(",", "")) for r in (grid, refine)]
    assert hours[0] / 64 <= wall[0] and hours[1] / 64 <= wall[1]  # no better than perfect
    # the oracle floor: 6 pairs x 2 depths x refine.seeds 3 at levine2020's N* (issue 25: 9.0e21)
    floor = rows["floor"]
    assert int(floor[1]) == 36 and float(floor[2]) == pytest.approx(9.09e21, rel=0.01)
    eta = float(rows["η"][8].rstrip("%;")) / 100
    assert eta == pytest.approx(float(floor[2]) / float(total[2]), rel=0.03)
    assert eta >= 0.15  # issue 25: the dense grid spent 37 times the floor (η 2.7%)


def test_budgets_short_of_a_transition_warn_per_pair(tmp_path, capsys):
    spec = spec_file(tmp_path, PAPER, space={"budgets": {"min": 2e6, "max": 3e8, "num": 6}})
    assert main(["plan", spec]) == 3  # no corpus here
    out = capsys.readouterr().out
    warnings = [line for line in out.splitlines() if line.startswith("warning: pair")]
    assert len(warnings) == 2
    assert warnings[0].startswith("warning: pair (30, 36): levine2020 puts N* = 5.59e+08 above")
    assert "largest budget 3e+08 (x1.86 outside)" in warnings[0]
    assert warnings[1].startswith("warning: pair (36, 48): levine2020 puts N* = 2.83e+09 above")


def test_packing_counts_trials_per_gpu_and_refuses_one_too_big(tmp_path, capsys):
    small = spec_file(
        tmp_path,
        QUICKSTART,
        resources={"gpu": 0.25, "gpu_memory_gb": 80},
        train={"steps": 100},
    )
    assert main(["plan", small]) == 0
    assert "resources.gpu = 0.25 packs 4 per GPU" in capsys.readouterr().out
    big = spec_file(
        tmp_path,
        PAPER,
        data={"corpus": "shakespeare"},
        train={"steps": 10},
        resources={"gpu": 0.5, "gpu_memory_gb": 80, "workers_per_trial": 1},
        refine={"design": "grid"},  # the dense grid's 1e10 cells: more than one whole GPU
    )
    assert main(["run", big, "--storage", str(tmp_path / "exp")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dwtune run: error: resources.gpu: got 0.5; trial L") and "\n" not in err
    assert "(micro-batch 1) needs about" in err and "a trial that spans several GPUs" in err
    assert not (tmp_path / "exp").exists()


def test_bench_results_on_the_device_set_the_mfu(tmp_path):
    results = tmp_path / "results.jsonl"
    rows = [
        {"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "mfu": m}
        for m in (0.2, 0.4, 0.5)
    ] + [{"device": "cpu", "device_name": "x86", "mfu": 0.9}]
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert planning.bench_mfu("h100", results) == (0.4, "median of 3 dwtune bench runs")
    assert planning.bench_mfu("a100", results) is None


def _floor_spec(write_spec, simulated_raw) -> str:
    """Depths 6 and 12 at the one budget N*(12) of levine2020, no refine pairs: the grid is
    exactly the oracle floor (the pair's two depths x its seeds at the reference N*)."""
    from dwtune.core.projection import LEVINE2020, transition_size

    n_star = transition_size(LEVINE2020, 12)
    raw = simulated_raw(name="atfloor", space={"depths": [6, 12], "budgets": [n_star], "seeds": 3})
    return str(write_spec(raw))


def test_a_plan_that_is_exactly_the_floor_has_eta_one(write_spec, simulated_raw, capsys):
    spec = _floor_spec(write_spec, simulated_raw)
    assert main(["plan", spec, "--cost", "--json"]) == 0
    cost = json.loads(capsys.readouterr().out)["cost"]
    floor = cost["floor"]
    assert floor["eta"] == pytest.approx(1.0, rel=1e-12)
    assert floor["flops"] == pytest.approx(cost["total"]["flops"], rel=1e-12)
    assert floor["gpu_hours"] == pytest.approx(cost["total"]["gpu_hours"], rel=1e-12)
    assert (floor["seeds"], floor["seeds_source"], floor["trainings"]) == (3, "space.seeds", 6)
    assert floor["trainings_per_pair"] == floor["planned_trainings_per_pair"] == 6
    (pair,) = floor["pairs"]
    assert (pair["shallow"], pair["deep"], pair["trainings"]) == (6, 12, 6)


def test_the_cost_text_prints_the_floor_per_pair_and_eta(write_spec, simulated_raw, capsys):
    spec = _floor_spec(write_spec, simulated_raw)
    assert main(["plan", spec, "--cost", "space.seeds=4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "oracle floor: each pair's two depths x 4 seed(s) (space.seeds)" in out[-5]
    assert out[-1].startswith("η = floor FLOPs ÷ planned FLOPs = 100%; trainings per pair: 8.0")
    pair, floor_row = out[-3].split(), out[-2].split()
    total_row = next(line for line in out if line.startswith("total ")).split()
    assert pair[:2] == ["6-12", "1.3e+07"] and pair[3] == "8"
    assert floor_row[1:3] == total_row[1:3]  # trainings and FLOPs: the grid is the floor


def test_micro_batches_fit_every_paper_cell_whose_weights_fit_one_gpu(capsys):
    """paper.yaml's dense grid on one 80 GB GPU a trial: the whole batch of 512 fits only the
    small cells; the rest run as micro-batches (checkpointed where no micro-batch fits without
    it), and only cells whose weights and AdamW state alone exceed a GPU are left, named, for
    sharded trials."""
    argv = ["plan", str(PAPER), "--json", "--device", "h100", "resources.workers_per_trial=1"]
    argv.append("refine.design=grid")  # every budget up to 1e10 (the law design: near N*)
    assert main(argv) == 3  # and no corpus here
    plan = json.loads(capsys.readouterr().out)
    cells, packing = plan["cells"], plan["packing"]
    share = packing["trial_memory_bytes"]
    assert share == pytest.approx(0.9 * H100_REPORTED)
    beyond = {(c["depth"], c["budget"]) for c in packing["cells_beyond_one_gpu"]}
    for cell in cells:
        assert cell["micro_batch"] * cell["accumulation"] >= 512
        assert cell["micro_batch"] * (cell["accumulation"] - 1) < 512  # no empty pass
        weights = 18 * cell["params_total"]  # fp32 weights, grads, 2 moments; bf16 copies
        assert cell["fits"] == (weights < share and (cell["depth"], cell["budget"]) not in beyond)
        if cell["fits"]:
            assert cell["memory_bytes"] <= share
    assert {c["budget"] for c in packing["cells_beyond_one_gpu"]} == {
        b for b in {c["budget"] for c in cells} if b > 5e9
    }
    micro = [c for c in cells if c["accumulation"] > 1 and c["fits"]]
    assert len(micro) == packing["cells_micro_batched"] > 0
    assert packing["cells_too_big"] == len(beyond) == 2 * 7
    does_not_fit = [r for r in plan["refusals"] if r["reason"] == "does_not_fit"]
    assert len(does_not_fit) == 1 and "14 of 112 cells do not fit" in does_not_fit[0]["message"]


H100_REPORTED = 85_520_809_984  # torch.cuda.get_device_properties().total_memory, H100 80GB


def test_the_sharded_cells_count_fsdp_buffers_and_no_checkpoint_copy_on_the_gpu(capsys):
    """paper.yaml's dense grid on H100s (their reported memory, under paper.yaml's 80 GiB
    cap): every sharded worker holds its fp32 master shard, FSDP2's gathered bf16 blocks and
    fp32 reduce-scatter buffers, and no bf16 copy of the whole model; checkpoints add nothing
    on the GPU (DCP shards and CPU loads stage in host memory) and every cell fits."""
    from dwtune.core.budget import count_params
    from dwtune.core.spec import load_spec

    argv = ["plan", str(PAPER), "--json", "--device", "h100", "refine.design=grid"]
    assert main(argv) == 3  # no corpus here, the one refusal
    plan = json.loads(capsys.readouterr().out)
    assert [r["reason"] for r in plan["refusals"]] == ["corpus_missing"]
    packing = plan["packing"]
    assert packing["gpu_memory_bytes"] == H100_REPORTED  # not 80 GiB
    share = packing["trial_memory_bytes"]
    assert share == pytest.approx(0.9 * H100_REPORTED)
    base = load_spec(PAPER).grid()[0].shape
    sharded = [c for c in plan["cells"] if c["workers"] > 1]
    assert len(sharded) == packing["cells_sharded"] > 0
    for cell in plan["cells"]:
        terms, workers = cell["memory_terms"], cell["workers"]
        assert cell["fits"] and cell["memory_bytes"] <= share < H100_REPORTED
        assert terms["checkpoint_device"] == 0
        shape = dataclasses.replace(base, depth=cell["depth"], width=cell["width"])
        params = count_params(shape)
        assert params.total == cell["params_total"]
        if workers == 1:  # fp32 state and autocast's bf16 copy; a CPU load of its checkpoint
            assert terms["gathered"] == 0 and terms["weights_and_optimizer"] == 18 * params.total
            assert terms["checkpoint_host"] == 12 * params.total
            continue
        assert terms["weights_and_optimizer"] == -(-16 * params.total // workers)
        block = params.blocks // cell["depth"]
        root = params.total - params.blocks
        assert terms["gathered"] == 2 * (2 * block + root) + 2 * block + 8 * block
        assert cell["memory_bytes"] == sum(v for k, v in terms.items() if "checkpoint" not in k)
        assert terms["checkpoint_host"] < 2 * 2**30  # a worker stages shards, not the model
    big = packing["sharded_largest"]
    assert big["bytes"] == max(c["memory_bytes"] for c in sharded)
    # these splits leave no room for an autocast bf16 copy of the whole model (2·P)
    assert all(c["memory_bytes"] + 2 * c["params_total"] > share for c in sharded)


def test_a_study_that_fits_only_as_micro_batches_plans_with_exit_0(tmp_path, capsys):
    spec = spec_file(
        tmp_path,
        PAPER,
        data={"corpus": "shakespeare"},
        train={"steps": 10},
        space={"budgets": [2e6, 1e9, 3e9]},
        resources={"workers_per_trial": 1},
        refine={"design": "grid"},  # every depth at each of these three budgets
    )
    assert main(["plan", spec, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["runnable"] and plan["refusals"] == []
    split = {
        (c["depth"], c["budget"]): (c["micro_batch"], c["accumulation"]) for c in plan["cells"]
    }
    assert split[(6, 2e6)] == (512, 1)
    assert split[(48, 3e9)][1] > 1 and all(c["fits"] for c in plan["cells"])
    assert main(["plan", spec]) == 0
    out = capsys.readouterr().out
    assert "mbatch" in out.splitlines()[3] and "`dwtune run` would refuse" not in out
    assert main(["plan", spec, "train.micro_batch_size=512"]) == 3  # the whole batch, forced
    assert "does_not_fit (resources.gpu): resources.gpu: got 1;" in capsys.readouterr().out


BLOG = ROOT / "search_spaces" / "blog_50m.yaml"
PILOT = ROOT / "search_spaces" / "gpu_pilot.yaml"


def test_blog_50m_runs_as_shipped_with_its_overfitting_design_stated(capsys):
    assert main(["plan", str(BLOG), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["runnable"] and plan["corpus"]["epochs"] <= plan["corpus"]["max_epochs"]
    assert plan["corpus"]["max_epochs"] > 4  # raised on purpose, and the file says why
    assert "OVERFITTING DESIGN" in BLOG.read_text()


def test_the_gpu_pilot_brackets_three_pairs_of_the_reference_law(capsys):
    assert main(["plan", str(PILOT), "--json"]) == 3  # only because its corpus is not here
    plan = json.loads(capsys.readouterr().out)
    assert [r["reason"] for r in plan["refusals"]] == ["corpus_missing"]
    assert plan["warnings"] == []  # every pair's reference N* lies inside the budgets
    spec = yaml.safe_load(PILOT.read_text())
    assert len(spec["refine"]["pairs"]) >= 3
    assert all(c["fits"] for c in plan["cells"])


@pytest.mark.slow  # --cost simulates the refine stage
def test_the_gpu_pilot_costs_at_most_8_h200_hours(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(planning, "BENCH_RESULTS", tmp_path / "no_bench.jsonl")
    assert main(["plan", str(PILOT), "--cost", "--device", "h200", "--json"]) == 3
    total = json.loads(capsys.readouterr().out)["cost"]["total"]
    assert 0 < total["gpu_hours"] <= 8


def test_the_cost_prints_the_precision_the_plan_buys_per_gpu_hour(
    write_spec, simulated_raw, capsys
):
    """plan --cost: the median σ(ln N*) of the simulated twin's bracketed pairs beside the
    planned GPU-hours per pair, in the text and in --json (cost.floor)."""
    from dwtune.core.spec import load_spec
    from dwtune.study.cost_estimate import refine_estimate

    raw = simulated_raw(
        name="bought",
        space={"depths": [6, 12], "budgets": {"min": 1e6, "max": 1e9, "num": 7}, "seeds": 1},
        refine={"pairs": [[6, 12]], "seeds": 2, "max_seeds": 3, "max_rounds": 3},
    )
    spec = write_spec(raw)
    assert main(["plan", str(spec), "--cost", "--json", "--gpus", "1"]) == 0
    floor = json.loads(capsys.readouterr().out)["cost"]["floor"]
    total = floor["planned_trainings_per_pair"]  # one pair: the whole plan
    assert total > 6
    # the same twin, run here: its one pair's σ(ln N*) is the median
    [found] = refine_estimate(load_spec(spec)).transitions
    assert found.status == "bracketed" and found.sigma_ln > 0
    assert floor["sigma_ln_median"] == pytest.approx(found.sigma_ln, rel=1e-9)
    assert main(["plan", str(spec), "--cost", "--gpus", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    total_hours = float(next(x for x in out if x.startswith("total ")).split()[3].replace(",", ""))
    line = next(x for x in out if x.startswith("precision: median"))
    assert f"median σ(ln N*) = {found.sigma_ln:.3g} e-folds" in line
    assert f"for {total_hours:,.1f} planned GPU-hours per pair" in line
