"""dwtune analyze on generated tables and on a simulated experiment directory."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dwtune.cli import main
from dwtune.core.analysis import analyse_pair, select_checkpoints, size_groups
from dwtune.core.records import grid_requests
from dwtune.core.spec import spec_from_dict
from dwtune.storage.experiment import export_experiment
from dwtune.storage.runs import table_from_frame
from dwtune.storage.store import ExperimentStore
from dwtune.study import refine as refine_stage
from dwtune.study.runners.local import LocalRunner
from tests.helpers.analysis_tables import (
    TOKENS,
    WANDB_COLUMNS,
    rounded_width,
    single_run_suite,
    sweep,
)

PLANTED = 2e7
# 25 sizes over 3 decades (0.29 e-folds apart), where the estimator's 95% interval covered the
# planted N* in 8 of the 10 tables below and 186 of 200 (93.0%; see README).
DENSE = np.geomspace(1e6, 1e9, 25)


def analyze_json(capsys, *argv) -> dict:
    assert main(["analyze", *map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def run_json(capsys, *argv) -> str:
    assert main([str(a) for a in argv] + ["--json"]) == 0
    return capsys.readouterr().out


def one_line_error(capsys, *argv) -> str:
    assert main(["analyze", *map(str, argv)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


@pytest.fixture
def wandb_csv(tmp_path) -> Path:
    path = tmp_path / "sweep.csv"
    sweep(n_stars=(PLANTED,), budgets=DENSE).to_csv(path, index=False)
    return path


@pytest.mark.parametrize(
    ("sep", "decimal"), [(";", ","), (";", "."), ("\t", ".")], ids=["excel-de", "semicolon", "tab"]
)
def test_a_spreadsheets_separator_and_decimal_comma_read_as_the_comma_csv(
    capsys, wandb_csv, tmp_path, sep, decimal
):
    other = tmp_path / "other.csv"
    pd.read_csv(wandb_csv).to_csv(other, sep=sep, decimal=decimal, index=False)
    expected = analyze_json(capsys, wandb_csv, "--columns", WANDB_COLUMNS)
    got = analyze_json(capsys, other, "--columns", WANDB_COLUMNS)
    assert got["pairs"] == expected["pairs"]


def test_an_undecided_pair_says_what_would_decide_it(capsys, tmp_path):
    """One run per shape, no checkpoints, sizes close to N*: nothing measures the noise."""
    table = sweep(n_stars=(PLANTED,), budgets=(PLANTED / 1.2, PLANTED, PLANTED * 1.2))
    table = table[(table.seed == 0) & (table.tokens == table.tokens.max())]
    path = tmp_path / "one_each.csv"
    table.drop(columns=["seed", "tokens"]).to_csv(path, index=False)
    assert main(["analyze", str(path), "--columns", WANDB_COLUMNS]) == 0
    [head] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("pair ")]
    assert "undecided (Δ within noise); to decide it: replicate runs (a seed column) or " in head
    assert "checkpoints (a tokens or step column)" in head


def test_planted_crossing_is_found_with_an_interval_covering_it(capsys, wandb_csv):
    result = analyze_json(capsys, wandb_csv, "--columns", WANDB_COLUMNS)
    [pair] = result["pairs"]
    assert (pair["depth_shallow"], pair["depth_deep"], pair["status"]) == (6, 12, "crosses")
    # One table is one draw: its estimate must lie within 3 σ(ln N*) of the planted N* (a
    # calibrated σ misses that 0.3% of the time); how often the 95% interval holds the planted
    # N* is a rate over tables, tested below.
    assert abs(math.log(pair["n_star"] / PLANTED)) <= 3 * pair["sigma_ln"]
    assert pair["n_star_low"] <= pair["n_star_low_68"] <= pair["n_star"]
    assert pair["n_star"] <= pair["n_star_high_68"] <= pair["n_star_high"]
    assert len(pair["points"]) == len(DENSE)
    assert all(p["seeds"] == 3 and p["delta_err"] > 0 for p in pair["points"])
    assert all("agrees" not in p for p in pair["points"])  # no --reference


def test_the_95_interval_covers_the_planted_crossing_in_most_tables():
    # 10 independent tables; at 95% nominal, 7 or fewer covering has probability 1.2%.
    mapping = dict(item.split("=") for item in WANDB_COLUMNS.split(","))
    covered = 0
    for rng_seed in range(10):
        frame = sweep(n_stars=(PLANTED,), budgets=DENSE, checkpoints=(1.0,), rng_seed=rng_seed)
        table, _ = select_checkpoints(table_from_frame(frame, Path("generated"), mapping))
        estimate = analyse_pair(size_groups(table), (6.0, 12.0), 0.25).estimate
        covered += estimate.n_star_low <= PLANTED <= estimate.n_star_high
    assert covered >= 8


def test_columns_mapping_matches_canonical_names(capsys, wandb_csv, tmp_path):
    canonical = tmp_path / "canonical.csv"
    names = {"n_layer": "depth", "d_model": "width", "n_params": "params", "val_loss": "loss"}
    pd.read_csv(wandb_csv).rename(columns=names).to_csv(canonical, index=False)
    mapped = analyze_json(capsys, wandb_csv, "--columns", WANDB_COLUMNS)
    plain = analyze_json(capsys, canonical)
    assert mapped["pairs"] == plain["pairs"]
    err = one_line_error(capsys, wandb_csv)
    assert "no column 'depth' for depth" in err and "--columns depth=n_layer" in err


def test_tokens_picks_the_checkpoint_nearest_to_t(capsys, wandb_csv):
    # The generator plants N* three times larger at the earlier checkpoints.
    last = analyze_json(capsys, wandb_csv, "--columns", WANDB_COLUMNS)
    early = analyze_json(capsys, wandb_csv, "--columns", WANDB_COLUMNS, "--tokens", "0.9e9")
    assert last["checkpoints"]["picked_low"] == last["checkpoints"]["picked_high"] == TOKENS
    assert early["checkpoints"]["picked_low"] == early["checkpoints"]["picked_high"] == TOKENS / 2
    assert (
        early["checkpoints"]["rule"] == "nearest"
        and early["checkpoints"]["runs"] == 2 * len(DENSE) * 3
    )
    [p_last], [p_early] = last["pairs"], early["pairs"]
    assert abs(math.log(p_last["n_star"] / PLANTED)) <= 3 * p_last["sigma_ln"]
    # The kink-bias correction moves this symmetric-tanh pair's chord 0.8% low (5.90e7 against
    # 5.95e7 uncorrected); the interval held only the corrected chord then, and its upper end
    # (5.977e7) missed the planted 6e7. It holds the uncorrected chord too now (crossing.py).
    assert p_early["n_star_low"] <= 3 * PLANTED <= p_early["n_star_high"]


def test_sizes_that_never_match_get_one_line(capsys, tmp_path):
    frame = sweep(n_stars=(PLANTED,), budgets=DENSE[:5], checkpoints=(1.0,))
    frame.loc[frame["n_layer"] == 12, "n_params"] *= 100  # depth 12 two decades away
    path = tmp_path / "apart.csv"
    frame.to_csv(path, index=False)
    err = one_line_error(capsys, path, "--columns", WANDB_COLUMNS)
    assert "pair 6-12: sizes never meet within --window 0.25" in err
    assert "would pair them" in err and "nearest are" in err


BAD_TABLES = {
    "missing": ("depth,width,params\n6,64,1e6\n", "no column 'loss' for loss"),
    "text": ("depth,width,params,loss\n6,64,1e6,3.1\n12,64,1e6,abc\n", "column loss row 2"),
    "nan": ("depth,width,params,loss\n6,64,1e6,3.1\n12,64,1e6,nan\n", "nan.csv: column loss row 2"),
    "inf": ("depth,width,params,loss\n6,64,inf,3.1\n12,64,1e6,3\n", "column params row 1: got inf"),
    "empty": ("", "the file is empty"),
    "header_only": ("depth,width,params,loss\n", "has no rows"),
    "one_depth": ("depth,width,params,loss\n6,64,1e6,3.1\n6,64,2e6,3.0\n", "only depth"),
}


@pytest.mark.parametrize("name", sorted(BAD_TABLES))
def test_bad_tables_are_one_line_exit_2(capsys, tmp_path, name):
    text, expected = BAD_TABLES[name]
    path = tmp_path / f"{name}.csv"
    path.write_text(text)
    assert expected in one_line_error(capsys, path)


def test_unreadable_parquet_and_bad_flags(capsys, tmp_path):
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not parquet at all")
    assert "cannot read it as Parquet" in one_line_error(capsys, broken)
    good = tmp_path / "ok.csv"
    good.write_text("depth,width,params,loss\n6,64,1e6,3.1\n12,64,1e6,3.0\n")
    assert "--window" in one_line_error(capsys, good, "--window", "-1")
    assert "--columns: got role 'depht'" in one_line_error(capsys, good, "--columns", "depht=x")
    assert "--reference" in one_line_error(capsys, good, "--reference", "nolaw")


def test_text_table_and_report(capsys, wandb_csv, tmp_path):
    out = tmp_path / "report"
    argv = ["analyze", str(wandb_csv), "--columns", WANDB_COLUMNS, "--reference", "levine2020"]
    assert main([*argv, "--report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "pair 6-12: crosses; N* = " in text and "levine2020 N* = 1.3e+07" in text
    assert "points where levine2020 predicts a sign disagree" in text
    assert "by a one-sided binomial test, consistent with levine2020 at α = 0.05" in text
    assert "noise (replicate runs)" in text and "signs: the one sign rule, α = 0.05" in text
    report = (out / "report.md").read_text()
    assert "### Pair 6-12" in report and "binomial test" in report
    assert "## Noise and signs" in report
    assert (out / "figures" / "analysis_deltas.png").stat().st_size > 10_000


def test_analyze_imports_neither_torch_nor_ray(wandb_csv):
    code = (
        "import sys\n"
        "from dwtune.cli import main\n"
        f"rc = main(['analyze', {str(wandb_csv)!r}, '--columns', {WANDB_COLUMNS!r}, '--json'])\n"
        "heavy = sorted(m for m in ('torch', 'ray', 'optuna') if m in sys.modules)\n"
        "print('HEAVY', heavy, rc, file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert "HEAVY [] 0" in proc.stderr
    assert json.loads(proc.stdout)["pairs"][0]["status"] == "crosses"


# ---------------------------------------------------------------- an experiment directory

STUDY = {
    "name": "analyze_study",
    "trainer": "simulated",
    "data": {"tokenizer": "bpe", "vocab_size": 2000, "seq_len": 128},
    "model": {"heads": 2, "width_multiple": 2},
    "space": {"depths": [6, 12, 18, 24], "budgets": {"min": 1e6, "max": 1e9, "num": 7}, "seeds": 1},
    "train": {"steps": 200, "batch_size": 8, "eval_every": 100},
    "refine": {
        "pairs": [[6, 12], [12, 18], [18, 24]],
        "tolerance": 0.05,
        "seeds": 1,
        "max_seeds": 4,
        "max_rounds": 8,
    },
}


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> Path:
    """A simulated study (grid and refine stages, in-process) with trials.parquet exported."""
    spec = spec_from_dict(STUDY)
    store = ExperimentStore.for_spec(tmp_path_factory.mktemp("study"), spec)
    store.initialise(spec)
    runner = LocalRunner(spec, store)
    runner.run(grid_requests(spec))
    refine_stage.run_refine(spec, store, runner.run)
    export_experiment(store)
    return store.root


def test_experiment_directory_gives_the_studys_transitions(capsys, study_dir):
    result = analyze_json(capsys, study_dir, "--reference", "levine2020")
    assert result["simulated"] is True
    study = pd.read_parquet(study_dir / "transitions.parquet").set_index("pair")
    for pair in result["pairs"]:
        row = study.loc[pair["pair"]]
        assert pair["transition_status"] == row["status"] == "bracketed"
        # the same estimator on the same trainings: N* inside the study's own interval, and
        # the two estimates within the intervals' combined width
        assert row["n_star_low"] <= pair["n_star"] <= row["n_star_high"]
        assert pair["n_star_low"] <= row["n_star"] <= pair["n_star_high"]
    # the simulated law is the reference's constants: every decided point agrees, and the
    # test of the disagreements does not reject it
    ref = result["reference"]
    assert ref["decided"] > 10 and ref["agree"] == ref["decided"]
    test = ref["test"]
    assert test["disagree"] == 0 and not test["rejected"] and test["p_value"] == 1.0
    assert ref["summary"].startswith(f"0 of {test['predicted']} points where levine2020 predicts")
    assert result["noise"]["method"] == "measured"  # the refine stage's seeds
    assert math.isclose(
        result["pairs"][0]["law_n_star"], 12 * 12 * math.exp(2 * (5.039 + 0.0555 * 12))
    )


def test_experiment_directory_checkpoints_come_from_its_curves(capsys, study_dir):
    curves = pd.read_parquet(study_dir / "curves.parquet")
    first = float(curves["tokens"].min())
    result = analyze_json(capsys, study_dir, "--tokens", first * 1.1, "--pairs", "6-12")
    picked = result["checkpoints"]
    assert picked["rule"] == "nearest" and picked["picked_low"] == picked["picked_high"] == first
    assert picked["rows"] == len(curves)  # every evaluation of every finished trial


def test_fit_and_analyze_name_the_preferred_law_on_the_simulated_study(capsys, study_dir):
    # The simulated surface plants levine2020's law; its three pairs are compared by AIC.
    assert main(["fit", str(study_dir)]) == 0
    text = capsys.readouterr().out
    assert "competing laws on the same pairs: preferred law: levine2020 (ΔAIC = " in text
    assert "  separable (loss = A/dx + B/L + E" in text and "175B: depth " in text
    fit = json.loads(run_json(capsys, "fit", study_dir))["competing_laws"]
    assert fit["status"] == "compared" and fit["criterion"] == "aic"
    assert fit["preferred"] == "levine2020" and fit["margin"] >= 2
    analysed = analyze_json(capsys, study_dir)["fit"]["competing_laws"]
    assert analysed["preferred"] == "levine2020"
    assert [law["law"] for law in analysed["laws"]] == ["levine2020", "separable"]


@pytest.mark.slow  # a fit and its bootstrap on a whole study
def test_three_crossing_pairs_give_the_fit_and_a_study_fit_is_a_reference(capsys, study_dir):
    from dwtune.study.fit_stage import write_fit

    result = analyze_json(capsys, study_dir)
    fit = result["fit"]
    assert fit["status"] == "fitted" and fit["n_points"] == 3
    assert fit["source"] == str(study_dir) and fit["simulated"] is True
    assert [round(r["budget"]) for r in fit["projections"]] == [175_000_000_000, 10**12, 10**13]
    assert abs(fit["b"] - 0.0555) < 5 * fit["se_b"]  # the planted slope
    write_fit(study_dir)  # the study's own fit.json, as its fit stage writes it
    held = analyze_json(capsys, study_dir, "--reference", study_dir)
    ref = held["reference"]
    assert ref["law"] == "study" and f"consistent with the fit of {study_dir}" in ref["summary"]
    assert ref["decided"] > 10 and ref["agree"] == ref["decided"]
    verdicts = {p["verdict"] for pair in held["pairs"] for p in pair["points"]}
    assert "no_prediction" in verdicts or "within_noise" in verdicts


# ---------------------------------------------------------------- one run per shape

SUITE_BUDGETS = np.geomspace(1e6, 1e9, 25)  # 0.29 e-folds apart: each budget its own point
SHORT = (12, 6)  # depth 12's run at budget 6 stopped at 75% of the tokens
FAR = {36: np.geomspace(3e9, 3e10, 4)}  # depth 36 only above depth 24's largest size


@pytest.fixture(scope="module")
def suite_csv(tmp_path_factory) -> Path:
    """One run per shape with 20 checkpoints each (SIMULATED losses, jitter sd 0.002)."""
    path = tmp_path_factory.mktemp("suite") / "suite.csv"
    frame = single_run_suite(budgets=SUITE_BUDGETS, short={SHORT: 0.75}, far_depths=FAR)
    frame.to_csv(path, index=False)
    return path


def test_one_run_per_shape_is_judged_at_its_checkpoint_jitter(capsys, suite_csv):
    result = analyze_json(capsys, suite_csv, "--reference", "levine2020")
    noise = result["noise"]
    assert noise["method"] == "checkpoint_jitter"
    assert "cubic in ln tokens" in noise["description"]["checkpoint_jitter"]
    assert "not seed-to-seed variation" in noise["limits"]
    depths = {d["depth"]: d for d in noise["jitter"]["per_depth"]}
    assert sorted(depths) == [6, 12, 18, 24, 36]
    for depth in (6, 12, 18, 24):  # 25 runs x 6 dof: the pooled sd within ~6% (1 sd)
        assert depths[depth]["sd"] == pytest.approx(0.002, rel=0.2)
    for pair in result["pairs"]:
        assert pair["noise"]["method"] == "checkpoint_jitter"
        assert pair["noise"]["sd_low"] == pytest.approx(0.002 * math.sqrt(2), rel=0.2)
    assert result["rule"]["alpha"] == 0.05 and result["rule"]["looks"] == 1
    assert main(["analyze", str(suite_csv)]) == 0
    text = capsys.readouterr().out
    assert "noise (checkpoint jitter):" in text and "what it cannot show:" in text
    assert "depth 6: 0.002" in text


def test_a_one_run_per_shape_suite_names_the_preferred_law(capsys, suite_csv):
    # Gemstones-like: one run per shape; its final losses come from levine2020's surface.
    competing = analyze_json(capsys, suite_csv)["fit"]["competing_laws"]
    assert competing["preferred"] == "levine2020" and competing["criterion"] == "aic"
    separable = next(law for law in competing["laws"] if law["law"] == "separable")
    shapes = {p["budget"]: p["width"] / p["depth"] for p in separable["projections"]}
    assert shapes[1.75e11] == pytest.approx(shapes[1e12])  # one aspect ratio at every N
    assert main(["analyze", str(suite_csv)]) == 0
    text = capsys.readouterr().out
    assert "competing laws on the same pairs: preferred law: levine2020" in text
    # fitted to the runs' losses too: its crossings miss the table's N* by more than the line's
    losses = analyze_json(capsys, suite_csv)["fit"]["separable_loss_fit"]
    assert losses["runs"] == 104 and losses["pairs"] == 3
    assert losses["rms_ln_n_error"] > losses["levine2020_fit_rms_ln_n_error"]
    assert "separable law fitted to 104 runs' losses: A = " in text


def test_runs_that_differ_in_tokens_are_named_with_the_factor(capsys, suite_csv):
    short = f"L12-w{rounded_width(*SHORT[:1], SUITE_BUDGETS[SHORT[1]])}"
    result = analyze_json(capsys, suite_csv)
    warnings = result["tokens"]["warnings"]
    assert len(warnings) == 2  # pairs 6-12 and 12-18 both compare the short run
    assert warnings[0].startswith("pair 6-12: runs L6-w")
    assert f"(2e+09 tokens) and {short} (1.5e+09) differ by 33% (a factor 1.33)" in warnings[0]
    assert warnings[0].endswith("pass --tokens T to compare at equal tokens")
    assert warnings[1].startswith("pair 12-18: runs L18-w")
    equal = analyze_json(capsys, suite_csv, "--tokens", "1.5e9")  # every run logged 1.5e9
    assert equal["tokens"]["warnings"] == [] and equal["tokens"]["target_warning"] is None
    off = analyze_json(capsys, suite_csv, "--tokens", "1.7e9")
    target = off["tokens"]["target_warning"]
    assert target.startswith("--tokens 1.7e+09: 1 run(s) have no checkpoint within 2% of it")
    assert f"farthest: {short} at 1.5e+09 tokens (a factor 1.13)" in target


def test_a_default_pair_whose_sizes_never_meet_is_skipped(capsys, suite_csv):
    result = analyze_json(capsys, suite_csv)
    assert [p["pair"] for p in result["pairs"]] == ["6-12", "12-18", "18-24"]
    [skipped] = result["skipped"]
    assert skipped["pair"] == "24-36"
    assert skipped["reason"].startswith("pair 24-36: sizes never meet within --window 0.25")
    assert main(["analyze", str(suite_csv)]) == 0
    assert "skipped: pair 24-36: sizes never meet" in capsys.readouterr().out
    # asked for explicitly and alone: nothing can be analysed, one line, exit 2
    assert "pair 24-36: sizes never meet" in one_line_error(capsys, suite_csv, "--pairs", "24-36")


@pytest.mark.parametrize(("a", "rejected"), [(5.039, False), (4.639, True)])
def test_the_verdict_test_keeps_the_right_law_and_rejects_a_wrong_one(
    capsys, tmp_path, a, rejected
):
    # Planted a = 4.639 puts every N* a factor e^-0.8 = 0.45 below levine2020's: about two
    # sizes per pair fall between. Over 20 tables each: the right law rejected in 0, the
    # wrong one in 20 (0 and 6-7 disagreements of 75). A shift of a by -0.2 (N* x 0.67,
    # under one size step) gave 3 of 75 and was rejected in none: the test's power needs
    # sizes between the two N*.
    path = tmp_path / "suite.csv"
    single_run_suite(budgets=SUITE_BUDGETS, a=a).to_csv(path, index=False)
    ref = analyze_json(capsys, path, "--reference", "levine2020")["reference"]
    assert ref["test"]["predicted"] == 75 and ref["test"]["rejected"] is rejected
    assert ("the law is rejected: p = " in ref["summary"]) is rejected


def test_the_fit_includes_a_censored_pair(capsys, tmp_path):
    # levine2020's N*(30) = 2.4e8 lies above the largest size: pair 24-30 never crosses.
    path = tmp_path / "suite.csv"
    single_run_suite(depths=(6, 12, 18, 24, 30), budgets=np.geomspace(1e6, 2e8, 17)).to_csv(
        path, index=False
    )
    result = analyze_json(capsys, path)
    status = {p["pair"]: p["transition_status"] for p in result["pairs"]}
    assert status == {"6-12": "bracketed", "12-18": "bracketed", "18-24": "bracketed",
                      "24-30": "censored_high"}  # fmt: skip
    fit = result["fit"]
    assert fit["method"] == "censored_mle" and fit["n_points"] == 3
    assert fit["censored_in_fit"] == ["24-30"]


@pytest.mark.parametrize("alpha", [0.05, 0.001])
def test_every_sign_is_the_rules_t_test_at_alpha(capsys, suite_csv, alpha):
    from scipy import stats

    result = analyze_json(capsys, suite_csv, "--alpha", alpha)
    assert result["rule"]["alpha"] == alpha
    points = [p for pair in result["pairs"] for p in pair["points"]]
    for p in points:
        assert p["boundary"] == pytest.approx(stats.t.isf(alpha / 2, p["noise_dof"]), rel=1e-3)
        assert p["sign"] == (0 if abs(p["z"]) <= p["boundary"] else np.sign(p["z"]))
    assert any(p["sign"] == 0 for p in points)  # within noise exists at either level
    assert "--alpha" in one_line_error(capsys, suite_csv, "--alpha", "0.7")
