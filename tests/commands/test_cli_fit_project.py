"""dwtune fit / project / report on the command line: outputs, bad input, import hygiene."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dwtune.cli import main
from dwtune.core.fit import fit_transitions
from dwtune.core.intervals import SCALE_PRIOR_DOF, z_value

DEPTHS = [12, 18, 24, 30, 36]
A, B = 5.039, 0.0555


def write_csv(path: Path, rows: list[tuple], header: str = "depth,width,width_err") -> Path:
    lines = [header] + [",".join(str(v) for v in row) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def paper_rows() -> list[tuple]:
    """Noise-free widths on the published law with 3 % uncertainties."""
    return [(d, math.exp(A + B * d), 0.03 * math.exp(A + B * d)) for d in DEPTHS]


def write_transitions(
    exp_dir: Path, statuses: list[str] | None = None, simulated: bool = False
) -> Path:
    statuses = statuses or ["bracketed"] * len(DEPTHS)
    rows = []
    for (depth, width, err), status in zip(paper_rows(), statuses, strict=True):
        bracketed = status == "bracketed"
        rows.append(
            {
                "pair": f"{depth - 6}-{depth}",
                "depth_shallow": depth - 6,
                "depth_deep": depth,
                "status": status,
                "n_star": 12 * depth * width**2 if bracketed else math.nan,
                "n_star_low": 0.9 * 12 * depth * width**2,
                "n_star_high": 1.1 * 12 * depth * width**2,
                "width_deep": width if bracketed else math.nan,
                "width_deep_err": err if bracketed else math.nan,
                "width_shallow": width,
                "trials": 9,
                "seeds": 3,
                "simulated": simulated,
            }
        )
    exp_dir.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(exp_dir / "transitions.parquet")
    return exp_dir


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------- project


def test_project_reference_prints_the_published_numbers(capsys):
    code, out, err = run_cli(
        capsys,
        "project",
        "--budget",
        "1.75e11",
        "--budget",
        "1T",
        "--depth",
        "96",
        "--reference",
        "levine2020",
    )
    assert code == 0 and err == ""
    assert "budget 175B (1.75e+11 params): optimal depth 80.5 layers, width 13,459" in out
    assert "budget 1T (1e+12 params): optimal depth 94.7 layers, width 29,657" in out
    assert "depth 96: transition size 1.16T (1.164e+12 params)" in out


def test_project_defaults_to_the_reference(capsys):
    code, out, _ = run_cli(capsys, "project", "--budget", "175B")
    assert code == 0 and "law levine2020" in out


def test_project_json_within_two_percent_of_the_paper(capsys):
    code, out, _ = run_cli(
        capsys, "project", "--budget", "175B", "--budget", "1e12", "--depth", "96", "--json"
    )
    data = json.loads(out)
    assert code == 0 and data["law"]["name"] == "levine2020"
    assert data["budgets"][0]["depth"] == pytest.approx(80, rel=0.02)
    assert data["budgets"][1]["width"] == pytest.approx(30e3, rel=0.02)
    assert data["depths"][0]["n_star"] == pytest.approx(1.17e12, rel=0.02)
    assert data["budgets"][0]["depth_lo"] is None  # no covariance published: no interval


def test_project_takes_comma_separated_budgets_and_depths_as_repeated_flags(capsys):
    _, listed, _ = run_cli(capsys, "project", "--budget", "175B,1e12", "--depth", "48,96", "--json")
    _, repeated, _ = run_cli(
        capsys,
        "project",
        "--budget",
        "175B",
        "--budget",
        "1e12",
        "--depth",
        "48",
        "--depth",
        "96",
        "--json",
    )
    assert json.loads(listed) == json.loads(repeated)
    assert [b["budget"] for b in json.loads(listed)["budgets"]] == [1.75e11, 1e12]


def test_project_from_experiment_dir_has_intervals(capsys, tmp_path):
    exp = write_transitions(tmp_path / "exp")
    code, out, _ = run_cli(capsys, "project", str(exp), "--budget", "1T", "--json")
    data = json.loads(out)
    assert code == 0 and data["law"]["name"] == "study"
    row = data["budgets"][0]
    assert row["depth_lo"] < row["depth"] < row["depth_hi"]
    # Noise-free transitions on the published law reproduce its projection.
    assert row["depth"] == pytest.approx(94.7469, rel=1e-4)


def test_project_from_fit_json_and_csv_agree(capsys, tmp_path):
    csv = write_csv(tmp_path / "paper.csv", paper_rows())
    code, out, _ = run_cli(capsys, "fit", str(csv), "--json")
    assert code == 0
    fit_json = tmp_path / "fit.json"
    fit_json.write_text(out)
    _, from_json, _ = run_cli(capsys, "project", "--fit", str(fit_json), "--budget", "1T", "--json")
    _, from_csv, _ = run_cli(capsys, "project", "--fit", str(csv), "--budget", "1T", "--json")
    assert json.loads(from_json)["budgets"] == json.loads(from_csv)["budgets"]


def test_projections_from_fit_json_widen_with_the_fits_scatter(capsys, tmp_path):
    # Transitions scattered 3σ about the law: χ²_red far above 1, so the fit's intervals (and
    # every projection read back from fit.json) are t_n·s wide (intervals.interval_quantile:
    # n = ν₀ + dof, s² = (ν₀ + dof·χ²_red) / n), not normal.
    rows = [(d, w * math.exp(0.09 * (-1) ** i), e) for i, (d, w, e) in enumerate(paper_rows())]
    csv = write_csv(tmp_path / "scattered.csv", rows)
    _, out, _ = run_cli(capsys, "fit", str(csv), "--json")
    record = json.loads(out)
    assert record["chi2_red"] > 5
    n = SCALE_PRIOR_DOF + record["dof"]
    scale = math.sqrt((SCALE_PRIOR_DOF + record["dof"] * record["chi2_red"]) / n)
    assert record["interval_quantile"] == pytest.approx(stats.t.ppf(0.975, n) * scale, rel=1e-9)
    assert record["interval_quantile"] > 2 * z_value(0.95)
    (tmp_path / "fit.json").write_text(out)
    _, widened, _ = run_cli(
        capsys, "project", "--fit", str(tmp_path / "fit.json"), "--budget", "1T", "--json"
    )
    _, from_csv, _ = run_cli(capsys, "project", "--fit", str(csv), "--budget", "1T", "--json")
    row = json.loads(widened)["budgets"][0]
    assert row == json.loads(from_csv)["budgets"][0]
    # The same fit.json as written before the rule (no chi2_red, no dof): normal intervals.
    for key in ("chi2_red", "dof", "interval_quantile", "interval_rule"):
        record.pop(key)
    (tmp_path / "old.json").write_text(json.dumps(record))
    _, normal, _ = run_cli(
        capsys, "project", "--fit", str(tmp_path / "old.json"), "--budget", "1T", "--json"
    )
    old = json.loads(normal)["budgets"][0]
    assert old["depth"] == row["depth"]
    assert row["depth_lo"] < old["depth_lo"] < old["depth"] < old["depth_hi"] < row["depth_hi"]


def test_project_from_fit_json_keeps_the_simulated_flag(capsys, tmp_path):
    exp = write_transitions(tmp_path / "exp", simulated=True)
    _, fit_out, _ = run_cli(capsys, "fit", str(exp), "--json")
    (tmp_path / "fit.json").write_text(fit_out)
    code, out, _ = run_cli(capsys, "project", "--fit", str(tmp_path / "fit.json"), "--budget", "1T")
    assert code == 0
    assert out.startswith("SIMULATED data: a planted law, not a measurement\n")


# ---------------------------------------------------------------- fit


def test_fit_csv_json_matches_the_library(capsys, tmp_path):
    rng = np.random.default_rng(5)
    rows = [(d, w * math.exp(rng.normal(0, 0.03)), e) for d, w, e in paper_rows()]
    csv = write_csv(tmp_path / "table.csv", rows)
    code, out, _ = run_cli(capsys, "fit", str(csv), "--json")
    data = json.loads(out)
    expected = fit_transitions(*zip(*rows, strict=True))
    assert code == 0 and data["status"] == "fitted"
    assert data["a"] == pytest.approx(expected.a, rel=1e-12)
    assert data["se_b"] == pytest.approx(expected.se_b, rel=1e-12)
    assert data["errors_scaled_by_chi2_red"] is False


def test_fit_experiment_dir_keeps_censored_pairs_in_the_fit(capsys, tmp_path):
    # Pair 12-18 is censored_high with its bound 10% above the planted N* (n_star_high): the
    # likelihood asks the line to pass above that bound at depth 18, so it rises there.
    statuses = ["bracketed", "censored_high", "bracketed", "bracketed", "bracketed"]
    exp = write_transitions(tmp_path / "exp", statuses)
    code, out, _ = run_cli(capsys, "fit", str(exp))
    assert code == 0
    assert "over 4 bracketed transitions and 1 censored pair(s) at depths 12, 24, 30, 36" in out
    assert "(censored_mle: interval-censored likelihood)" in out
    assert "censored, in the fit: pair 12-18: depth 18 never beat depth 12 up to N = " in out
    assert "(3 seeds)" in out
    data = json.loads(run_cli(capsys, "fit", str(exp), "--json")[1])
    assert data["method"] == "censored_mle" and data["censored_in_fit"] == ["pair 12-18"]
    assert data["a"] + 18 * data["b"] > A + 18 * B + 1e-4  # pulled up at depth 18
    assert data["n_points"] == 4 and data["dof"] == 2


def test_fit_transitions_parquet_path(capsys, tmp_path):
    exp = write_transitions(tmp_path / "exp")
    code, out, _ = run_cli(capsys, "fit", str(exp / "transitions.parquet"), "--json")
    assert code == 0 and json.loads(out)["n_points"] == 5


# ---------------------------------------------------------------- bad input


def _write_bad_inputs(tmp: Path) -> None:
    """The files the bad-input cases name."""
    write_csv(tmp / "cols.csv", [(12, 300)], header="depth,width")
    write_csv(tmp / "zero.csv", [(12, 300, 5), (18, 0, 5), (24, 500, 5)])
    write_csv(tmp / "nan.csv", [(12, 300, 5), (18, 400, ""), (24, 500, 5)])
    write_csv(tmp / "text.csv", [(12, 300, 5), (18, "wide", 5), (24, 500, 5)])
    write_csv(tmp / "two.csv", [(12, 300, 5), (18, 400, 5)])
    (tmp / "garbage.parquet").write_bytes(b"not parquet at all")
    pd.DataFrame({"pair": ["1-2"]}).to_parquet(tmp / "short.parquet")
    (tmp / "empty_exp").mkdir()
    (tmp / "nofit.json").write_text(json.dumps({"status": "insufficient", "reason": "2 points"}))
    (tmp / "badcov.json").write_text(
        json.dumps({"status": "fitted", "a": 5, "b": 0.05, "cov": [1]})
    )
    good_cov = {"status": "fitted", "a": 5, "b": 0.05, "cov": [[1e-4, 0], [0, 1e-6]]}
    (tmp / "badchi2.json").write_text(json.dumps(good_cov | {"chi2_red": -1, "dof": 4}))


def _bad_inputs(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (argv, text the one-line error must contain), for the files under ``tmp``."""
    return {
        "missing file": (["fit", str(tmp / "nope.csv")], "no such file"),
        "missing columns": (["fit", str(tmp / "cols.csv")], "missing column(s) width_err"),
        "non-positive width": (["fit", str(tmp / "zero.csv")], "width at zero.csv row 2: got 0.0"),
        "NaN uncertainty": (["fit", str(tmp / "nan.csv")], "width_err at nan.csv row 2: got nan"),
        "text in a number column": (
            ["fit", str(tmp / "text.csv")],
            "column width row 2: got 'wide'",
        ),
        "too few points": (["fit", str(tmp / "two.csv")], "at least 3 bracketed transitions"),
        "not parquet": (["fit", str(tmp / "garbage.parquet")], "not a readable Parquet file"),
        "parquet missing columns": (["fit", str(tmp / "short.parquet")], "missing column(s)"),
        "dir without transitions": (["fit", str(tmp / "empty_exp")], "run the refine stage"),
        "wrong extension": (["fit", str(tmp / "nofit.json")], "expected an experiment directory"),
        "unparseable budget": (["project", "--budget", "175X"], "--budget: got '175X'"),
        "negative budget": (["project", "--budget=-1e9"], "--budget: got '-1e9'"),
        "bad depth": (["project", "--depth", "deep"], "--depth: got 'deep'"),
        "nothing to project": (["project"], "give at least one --budget"),
        "two laws": (
            ["project", "--budget", "1T", "--reference", "levine2020", "--fit", "x"],
            "choose one law",
        ),
        "unknown reference": (
            ["project", "--budget", "1T", "--reference", "gpt"],
            "--reference: got 'gpt'; expected a published fit: levine2020",
        ),
        "fit.json without fit": (
            ["project", "--budget", "1T", "--fit", str(tmp / "nofit.json")],
            "holds no fit (2 points)",
        ),
        "fit.json with a broken cov": (
            ["project", "--budget", "1T", "--fit", str(tmp / "badcov.json")],
            "a, b, cov (2x2), chi2_red or dof missing or not numbers",
        ),
        "fit.json with a negative chi2_red": (
            ["project", "--budget", "1T", "--fit", str(tmp / "badchi2.json")],
            "chi2_red must be a non-negative number",
        ),
        "bad level": (["fit", str(tmp / "nope.csv"), "--level", "2"], "level: got 2.0"),
        "report of empty dir": (["report", str(tmp / "empty_exp")], "no trials.parquet"),
    }


# The cases' names, from the table itself (building it writes nothing).
BAD_INPUT_NAMES = tuple(_bad_inputs(Path("bad-inputs")))


@pytest.mark.parametrize("name", BAD_INPUT_NAMES)
def test_bad_input_is_one_line_and_exit_code_2(capsys, tmp_path, name):
    _write_bad_inputs(tmp_path)
    argv, expected = _bad_inputs(tmp_path)[name]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"dwtune {argv[0]}: error: ")
    assert expected in lines[0]


def test_bad_input_through_the_real_entry_point(tmp_path):
    csv = write_csv(tmp_path / "nan.csv", [(12, 300, 5), (18, 400, "nan"), (24, 500, 5)])
    done = subprocess.run(
        [sys.executable, "-m", "dwtune", "fit", str(csv)], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "width_err at nan.csv row 2: got nan" in done.stderr


# ---------------------------------------------------------------- import hygiene


def test_fit_and_project_import_no_torch_ray_or_optuna(tmp_path):
    csv = write_csv(tmp_path / "paper.csv", paper_rows())
    exp = write_transitions(tmp_path / "exp")
    script = textwrap.dedent(
        f"""
        import contextlib, io, json, sys
        from dwtune.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            codes = [
                main(["fit", {str(csv)!r}, "--json"]),
                main(["fit", {str(exp)!r}]),
                main(["project", "--budget", "175B", "--depth", "96"]),
                main(["project", {str(exp)!r}, "--budget", "1T"]),
            ]
        heavy = ("torch", "ray", "optuna", "matplotlib", "dwtune.outputs.report")
        print(json.dumps({{"codes": codes, "loaded": [m for m in heavy if m in sys.modules]}}))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result == {"codes": [0, 0, 0, 0], "loaded": []}


def test_report_command_writes_the_report(capsys, tmp_path):
    exp = write_transitions(tmp_path / "exp")
    code, out, _ = run_cli(capsys, "report", str(exp))
    assert code == 0
    assert f"report: {exp / 'report.md'}" in out
    assert (exp / "fit.json").is_file() and (exp / "projections.parquet").is_file()


def test_project_flags_sub_layer_budgets_and_refuses_absurd_depths(capsys):
    code, out, _ = run_cli(capsys, "project", "--budget", "10")
    assert code == 0 and "below one layer" in out
    code, out, _ = run_cli(capsys, "project", "--budget", "175B")
    assert code == 0 and "below one layer" not in out
    code, _, err = run_cli(capsys, "project", "--depth", "1e9")
    assert (
        code == 2 and "--depth: got '1e9'; expected a positive number of layers up to 10,000" in err
    )


# ---------------------------------------------------------------- competing laws


def test_fit_names_the_preferred_law_and_a_csv_says_why_it_compares_none(capsys, tmp_path):
    exp = write_transitions(tmp_path / "exp")  # transitions exactly on levine2020's law
    code, out, _ = run_cli(capsys, "fit", str(exp))
    assert code == 0
    assert "competing laws on the same pairs: preferred law: levine2020 (ΔAICc = " in out
    assert "175B: depth 81 × width 13459; 1T: depth 95 × width 29657" in out  # the paper's
    data = json.loads(run_cli(capsys, "fit", str(exp), "--json")[1])["competing_laws"]
    assert data["preferred"] == "levine2020" and data["criterion"] == "aicc"
    separable = next(law for law in data["laws"] if law["law"] == "separable")
    assert separable["k"] == 1 and separable["loo_pairs"] == 5
    csv = write_csv(tmp_path / "paper.csv", paper_rows())
    code, out, _ = run_cli(capsys, "fit", str(csv))
    assert "competing laws: not compared (a table of depth,width,width_err names no pair" in out
