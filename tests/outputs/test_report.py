"""dwtune.outputs.report on synthetic experiment directories: full, simulated, partial."""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from matplotlib import image

from dwtune.core.errors import InputError
from dwtune.core.fit import chi2_tail, residual_z
from dwtune.core.projection import LEVINE2020, project_budget
from dwtune.outputs.report import ReportFiles, write_report
from dwtune.outputs.report.markdown import _quantile_note
from dwtune.storage.fit_json import law_from_json
from dwtune.storage.schemas import PROJECTION_SCHEMA
from dwtune.study.fit_stage import write_fit

PLANTED_A, PLANTED_B = 5.0, 0.06
DEPTHS = (6, 12, 18, 24, 30)
BUDGETS = tuple(np.logspace(5, 10, 11))
FIGURE_NAMES = (
    "1_loss_vs_size.png",
    "2_delta_per_pair.png",
    "3_fit_width_vs_depth.png",
    "4_projection.png",
)


def fit_and_report(exp_dir) -> ReportFiles:
    """What the pipeline does: the fit stage writes fit.json and projections, the report draws."""
    write_fit(exp_dir)
    return write_report(exp_dir)


def planted_n_star(depth: int) -> float:
    """Transition size of the planted law: 12·L·exp(2(a + b·L))."""
    return 12.0 * depth * math.exp(2.0 * (PLANTED_A + PLANTED_B * depth))


def synthetic_loss(depth: int, size: float) -> float:
    """A loss surface whose consecutive-depth Δ changes sign exactly at the planted N*.

    Going from depth L_(i-1) to L_i adds -0.01·ln(N / N*(L_i)) nats: a penalty below N*,
    a gain above it.
    """
    base = 1.5 + 20.0 * size**-0.15
    steps = [d for d in DEPTHS[1:] if d <= depth]
    return base - 0.01 * sum(math.log(size / planted_n_star(d)) for d in steps)


def trial_rows(seeds: int, simulated: bool | None, rng: np.random.Generator) -> list[dict]:
    rows = []
    for depth in DEPTHS:
        for budget in BUDGETS:
            width = max(2, round(math.sqrt(budget / (12 * depth)) / 2) * 2)
            size = 12 * depth * width * width
            for seed in range(seeds):
                loss = synthetic_loss(depth, size) + rng.normal(0.0, 0.002)
                row = {
                    "trial_id": f"d{depth}-n{budget:.3g}-s{seed}",
                    "stage": "grid",
                    "depth": depth,
                    "width": width,
                    "heads": 2,
                    "budget": float(budget),
                    "params_non_embedding": size,
                    "params_total": size + 2000 * width,
                    "seed": seed,
                    "status": "finished",
                    "final_val_loss": loss + 0.001,
                    "best_val_loss": loss,
                }
                if simulated is not None:
                    row["simulated"] = simulated
                rows.append(row)
    rows[0]["status"] = "diverged"  # a failed trial must be ignored, not plotted
    rows[0]["best_val_loss"] = math.nan
    return rows


def transition_row(shallow: int, deep: int, status: str, rng: np.random.Generator) -> dict:
    n_star = planted_n_star(deep)
    width = math.sqrt(n_star / (12 * deep)) * math.exp(rng.normal(0.0, 0.03))
    bounds = {
        "bracketed": (0.8 * n_star, 1.25 * n_star),
        "censored_high": (BUDGETS[-1], math.nan),
        "censored_low": (math.nan, BUDGETS[0]),
        "undecided": (0.5 * n_star, 2.0 * n_star),
    }[status]
    bracketed = status == "bracketed"
    return {
        "pair": f"{shallow}-{deep}",
        "depth_shallow": shallow,
        "depth_deep": deep,
        "status": status,
        "n_star": n_star if bracketed else math.nan,
        "n_star_low": bounds[0],
        "n_star_high": bounds[1],
        "width_deep": width if bracketed else math.nan,
        "width_deep_err": 0.03 * width if bracketed else math.nan,
        "width_shallow": math.sqrt(n_star / (12 * shallow)),
        "trials": 12,
        "seeds": 3,
        "simulated": True,
    }


def make_study(
    root: Path,
    statuses: tuple[str, ...] | None = ("bracketed",) * 4,
    simulated: bool | None = True,
    trials: bool = True,
    spec: str | None = None,
) -> Path:
    """An experiment directory with trials.parquet, transitions.parquet (optional), spec.yaml."""
    rng = np.random.default_rng(7)
    root.mkdir(parents=True, exist_ok=True)
    if trials:
        pd.DataFrame(trial_rows(2, simulated, rng)).to_parquet(root / "trials.parquet")
    if statuses is not None:
        pairs = list(itertools.pairwise(DEPTHS))[: len(statuses)]
        rows = [transition_row(s, d, st, rng) for (s, d), st in zip(pairs, statuses, strict=True)]
        frame = pd.DataFrame(rows, columns=list(transition_row(6, 12, "bracketed", rng)))
        if simulated is not True:
            frame["simulated"] = False
        frame.to_parquet(root / "transitions.parquet")
    if spec is not None:
        (root / "spec.yaml").write_text(spec)
    return root


def assert_png(path: Path) -> None:
    pixels = image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 300 and pixels.shape[1] > 500


SPEC = "name: synthetic\nfit:\n  budgets: [1e9, 1.75e11, 1T]\n"


@pytest.fixture(scope="module")
def reported(tmp_path_factory) -> tuple[Path, ReportFiles]:
    """The study with SPEC, fitted and reported once, for the tests that only read it."""
    exp = make_study(tmp_path_factory.mktemp("reported") / "exp", spec=SPEC)
    return exp, fit_and_report(exp)


@pytest.fixture(scope="module")
def reported_without_spec(tmp_path_factory) -> tuple[Path, ReportFiles]:
    """The study without a spec.yaml, fitted and reported once, for the tests that only read it."""
    exp = make_study(tmp_path_factory.mktemp("reported") / "exp")
    return exp, fit_and_report(exp)


def test_full_study_writes_every_file(reported):
    exp, files = reported
    assert files.report == exp / "report.md"
    # A fitted study also gets the law checks (forms, leave-one-pair-out) figure.
    assert [p.name for p in files.figures] == [*FIGURE_NAMES, "6_law_checks.png"]
    for path in files.figures:
        assert_png(path)
    assert not list(exp.rglob(".*.tmp-*")), "temporary files must be renamed or removed"


def test_fit_json_holds_the_fit_and_planted_law_is_inside(reported_without_spec):
    exp, _ = reported_without_spec
    record = json.loads((exp / "fit.json").read_text())
    assert record["status"] == "fitted"
    assert record["n_points"] == 4 and record["dof"] == 2
    # 4 points with 3 % errors: the planted law must sit within the 95 % intervals.
    assert record["ci_a"][0] < PLANTED_A < record["ci_a"][1]
    assert record["ci_b"][0] < PLANTED_B < record["ci_b"][1]
    assert record["metadata"]["dwtune.git_revision"]
    assert "numpy" in record["metadata"]["dwtune.versions"]


def test_projections_parquet_schema_metadata_and_values(reported):
    exp, _ = reported
    table = pq.read_table(exp / "projections.parquet")
    assert table.schema.remove_metadata() == PROJECTION_SCHEMA
    meta = table.schema.metadata
    assert json.loads(meta[b"dwtune.core.spec"]) == yaml.safe_load(SPEC)
    assert "numpy" in json.loads(meta[b"dwtune.versions"])
    assert meta[b"dwtune.git_revision"]
    frame = table.to_pandas()
    assert set(frame["law"]) == {"study", "levine2020"}
    ref = frame[(frame["law"] == "levine2020") & (frame["query"] == "budget")]
    row = ref[np.isclose(ref["n_params"], 1.75e11)].iloc[0]
    assert row["depth"] == pytest.approx(project_budget(LEVINE2020, 1.75e11).depth, rel=1e-12)
    assert frame["n_params"].max() == pytest.approx(1e13)


def test_report_numbers_match_the_records(reported):
    exp, _ = reported
    text = (exp / "report.md").read_text()
    record = json.loads((exp / "fit.json").read_text())
    assert f"{record['a']:.4f}" in text and f"{record['b']:.5f}" in text
    frame = pd.read_parquet(exp / "projections.parquet")
    study = frame[(frame["law"] == "study") & (frame["query"] == "budget")]
    row = study[np.isclose(study["n_params"], 1e12)].iloc[0]
    assert f"{row['depth']:.1f} [{row['depth_lo']:.1f}, {row['depth_hi']:.1f}]" in text
    law, _ = law_from_json(exp / "fit.json")  # as `dwtune project --fit` reads it
    projected = project_budget(law, 1e12)
    assert row["depth"] == pytest.approx(projected.depth, rel=1e-12)
    assert row["depth_lo"] == pytest.approx(projected.depth_lo, rel=1e-9)  # the fit's own rule
    q = record["interval_quantile"]
    assert record["ci_a"][1] - record["a"] == pytest.approx(q * record["se_a"], rel=1e-9)
    assert f"intervals ± {q:.2f} std. errors" in text
    for name in FIGURE_NAMES:
        assert f"(figures/{name})" in text
    # the fit's goodness: χ²'s tail probability and the transition furthest from the law
    columns = [[p[k] for p in record["points"]] for k in ("depth", "width", "width_err")]
    z = residual_z(record["a"], record["b"], *columns)
    worst = int(np.argmax(np.abs(z)))
    assert f"{chi2_tail(record['chi2_red'], record['dof']):.3g}" in text
    assert f"{record['points'][worst]['label']} at {z[worst]:+.1f}σ" in text


def test_simulated_data_is_flagged(reported_without_spec):
    exp, _ = reported_without_spec  # simulated=True
    text = (exp / "report.md").read_text()
    assert "SIMULATED DATA" in text.splitlines()[2]  # right under the title
    assert pd.read_parquet(exp / "projections.parquet").query("law == 'study'")["simulated"].all()


def test_real_data_is_not_flagged(tmp_path):
    exp = make_study(tmp_path / "exp", simulated=False)
    fit_and_report(exp)
    assert "SIMULATED" not in (exp / "report.md").read_text()


def test_missing_simulated_column_means_not_simulated(tmp_path):
    exp = make_study(tmp_path / "exp", simulated=None)
    fit_and_report(exp)
    assert "SIMULATED" not in (exp / "report.md").read_text()


def test_too_few_transitions_says_what_was_found(tmp_path):
    statuses = ("bracketed", "censored_high", "bracketed", "censored_low")
    exp = make_study(tmp_path / "exp", statuses=statuses)
    files = fit_and_report(exp)
    text = (exp / "report.md").read_text()
    assert "**No fit.**" in text and "Found 2 bracketed transition(s)" in text
    assert "- pair 6-12: depth 12, dx* = 311.4 ± 9.3 (3 seeds)" in text
    assert "2 pair(s) not bracketed" in text and "(3 seeds)" in text
    assert "depth 18 never beat depth 12 up to N = 1e+10" in text
    names = [p.name for p in files.figures]
    assert {"1_loss_vs_size.png", "2_delta_per_pair.png", "4_projection.png"} <= set(names)
    record = json.loads((exp / "fit.json").read_text())
    assert record["status"] == "insufficient" and len(record["censored"]) == 2
    laws = set(pd.read_parquet(exp / "projections.parquet")["law"])
    assert laws == {"levine2020"}


def test_no_transitions_file_still_reports(tmp_path):
    exp = make_study(tmp_path / "exp", statuses=None)
    files = fit_and_report(exp)
    text = (exp / "report.md").read_text()
    assert "No transitions yet" in text and "**No fit.**" in text
    assert [p.name for p in files.figures] == [
        "1_loss_vs_size.png",
        "2_delta_per_pair.png",
        "4_projection.png",
    ]


def test_empty_transitions_file_still_reports(tmp_path):
    exp = make_study(tmp_path / "exp", statuses=())
    fit_and_report(exp)
    assert "No transitions yet" in (exp / "report.md").read_text()


def test_transitions_without_trials_still_reports(tmp_path):
    exp = make_study(tmp_path / "exp", trials=False)
    files = fit_and_report(exp)
    text = (exp / "report.md").read_text()
    assert "trials.parquet not found" in text and "No completed trials yet" in text
    assert len(files.figures) == 5  # 1-4 and the law checks of the fit (no loss curves)


def test_nan_uncertainty_is_reported_not_raised(tmp_path):
    exp = make_study(tmp_path / "exp")
    frame = pd.read_parquet(exp / "transitions.parquet")
    frame.loc[1, "width_deep_err"] = math.nan
    frame.to_parquet(exp / "transitions.parquet")
    fit_and_report(exp)
    assert "width_err at pair 12-18: got nan" in (exp / "report.md").read_text()


def test_tensorboard_summary_holds_the_fit(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    exp = make_study(tmp_path / "exp")
    fit_and_report(exp)
    fit_and_report(exp)  # a rerun replaces the summary instead of adding a second one
    events = list((exp / "tb" / "fit").glob("events.out.tfevents.*"))
    assert len(events) == 1
    board = EventAccumulator(str(exp / "tb" / "fit")).Reload()
    record = json.loads((exp / "fit.json").read_text())
    assert board.Scalars("fit/b")[0].value == pytest.approx(record["b"], rel=1e-6)
    assert "fit/summary/text_summary" in board.Tags()["tensors"]


@pytest.mark.parametrize(
    ("spec", "budgets"),
    [
        ("name: one\nfit:\n  budgets: 5e11\n", ["500B"]),
        ("name: bad\nfit:\n  budgets: [lots]\n", ["175B", "1T", "10T"]),
        ("name: odd\nfit: [1, 2]\n", ["175B", "1T", "10T"]),
        ("name: [unclosed\n", ["175B", "1T", "10T"]),
    ],
)
def test_spec_budgets_are_used_or_defaults_with_a_note(tmp_path, spec, budgets):
    exp = make_study(tmp_path / "exp", spec=spec)
    fit_and_report(exp)
    text = (exp / "report.md").read_text()
    projection = text.split("## Projection")[1]
    assert re.findall(r"^\| (\S+) \(", projection, re.MULTILINE) == budgets
    assert ("default" in text) == (budgets[0] == "175B")


def test_not_a_directory_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="not a directory"):
        fit_and_report(tmp_path / "missing")


def test_empty_directory_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match=r"no trials\.parquet or transitions\.parquet"):
        fit_and_report(tmp_path)


def test_trials_missing_columns_is_an_input_error(tmp_path):
    exp = make_study(tmp_path / "exp")
    pd.read_parquet(exp / "trials.parquet").drop(columns=["best_val_loss"]).to_parquet(
        exp / "trials.parquet"
    )
    with pytest.raises(InputError, match="missing column"):
        fit_and_report(exp)


def test_loss_curves_figure_is_drawn_from_curves_parquet(tmp_path):
    exp = make_study(tmp_path / "exp")
    trials = pd.read_parquet(exp / "trials.parquet")
    steps = [100, 200, 300]
    curves = pd.DataFrame(
        {
            "trial_id": np.repeat(trials["trial_id"].to_numpy(), len(steps)),
            "step": np.tile(steps, len(trials)),
            "val_loss": np.tile([3.0, 2.5, 2.2], len(trials)),
        }
    )
    curves.to_parquet(exp / "curves.parquet")
    files = fit_and_report(exp)
    assert [p.name for p in files.figures][-2:] == ["5_loss_curves.png", "6_law_checks.png"]
    assert (exp / "figures" / "5_loss_curves.png").stat().st_size > 10_000
    assert "5_loss_curves.png" in (exp / "report.md").read_text()


def test_dwtune_report_fits_a_directory_without_fit_files_then_only_reads_them(tmp_path, capsys):
    from dwtune.cli import main

    exp = make_study(tmp_path / "exp", spec=SPEC)
    assert not (exp / "fit.json").exists()
    assert main(["report", str(exp)]) == 0
    assert "fit stage: wrote" in capsys.readouterr().out
    fit_bytes = (exp / "fit.json").read_bytes()
    assert json.loads(fit_bytes)["status"] == "fitted"
    assert main(["report", str(exp)]) == 0  # fit files newer than the tables: only drawn
    assert "fit stage" not in capsys.readouterr().out
    assert (exp / "fit.json").read_bytes() == fit_bytes


def test_the_report_alone_refuses_a_directory_the_fit_stage_never_saw(tmp_path):
    exp = make_study(tmp_path / "exp", spec=SPEC)
    with pytest.raises(InputError, match=r"fit\.json: no such file; the fit stage writes it"):
        write_report(exp)


def test_a_censored_pair_is_in_the_fit_and_the_law_checks_are_reported(tmp_path):
    from dwtune.core.fit import fit_transitions

    statuses = ("bracketed", "bracketed", "bracketed", "censored_high")
    exp = make_study(tmp_path / "exp", statuses=statuses)
    files = fit_and_report(exp)
    record = json.loads((exp / "fit.json").read_text())
    assert record["method"] == "censored_mle" and record["censored_in_fit"] == ["pair 24-30"]
    points = record["points"]
    bracketed_only = fit_transitions(
        [p["depth"] for p in points], [p["width"] for p in points], [p["width_err"] for p in points]
    )
    # "depth 30 never beat depth 24 up to 1e10" asks for a steeper line than the 3 points alone.
    assert record["b"] > bracketed_only.b
    checks = record["law_checks"]
    assert [r["pair"] for r in checks["leave_one_pair_out"]] == [
        "pair 6-12", "pair 12-18", "pair 18-24", "pair 24-30"
    ]  # fmt: skip
    assert checks["bootstrap"]["status"] == "not run"  # no pair_deltas.parquet here
    text = (exp / "report.md").read_text()
    assert "and 1 censored pair(s) (pair 24-30)" in text
    assert "## Law checks: form, leave-one-pair-out, study bootstrap" in text
    assert "6_law_checks.png" in [p.name for p in files.figures]
    competing = record["competing_laws"]  # the censored pair is in both laws' likelihood
    assert competing["status"] == "compared" and {law["n"] for law in competing["laws"]} == {4}
    assert "Competing laws (docs/method.md): preferred law: " in text


# ---------------------------------------------------------------- a report that explains itself


def _with_curves(exp: Path, refine_rows: int = 0) -> Path:
    """curves.parquet for every trial of ``exp``; ``refine_rows`` grid rows relabelled refine."""
    trials = pd.read_parquet(exp / "trials.parquet")
    trials["stage"] = ["refine" if i < refine_rows else "grid" for i in range(len(trials))]
    trials.to_parquet(exp / "trials.parquet")
    steps = [100, 200, 300]
    pd.DataFrame(
        {
            "trial_id": np.repeat(trials["trial_id"].to_numpy(), len(steps)),
            "step": np.tile(steps, len(trials)),
            "val_loss": np.tile([3.0, 2.5, 2.2], len(trials)),
        }
    ).to_parquet(exp / "curves.parquet")
    return exp


def test_the_report_opens_with_the_answer_and_its_projection(reported):
    _, files = reported
    text = files.report.read_text()
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[0] == "## Answer"
    answer = text.split("## Answer", 1)[1].split("\n## ", 1)[0]
    assert "**Pair 6-12**" in answer
    assert "**Projection at 175B parameters**" in answer and "optimal depth L* =" in answer


def test_the_report_and_fit_json_hold_only_relative_paths(reported):
    exp, files = reported
    assert str(exp) not in files.report.read_text()
    assert str(exp.parent) not in files.fit_json.read_text()
    assert json.loads(files.fit_json.read_text())["source"] == "transitions.parquet"
    for link in re.findall(r"\]\(([^)]+)\)", files.report.read_text()):
        assert not Path(link).is_absolute() and (exp / link).is_file(), link


def test_every_figure_is_captioned_and_marked_simulated(tmp_path):
    from PIL import Image

    from dwtune.core.vocabulary import Figure
    from dwtune.outputs.report.markdown import CAPTIONS

    assert set(CAPTIONS) == set(Figure) - {Figure.ANALYSIS_DELTAS}  # analyze captions its own
    exp = _with_curves(make_study(tmp_path / "sim"))
    files = fit_and_report(exp)
    text = files.report.read_text()
    names = {p.name for p in files.figures}
    assert {"5_loss_curves.png", "6_law_checks.png"} <= names
    for path in files.figures:
        caption = CAPTIONS[path.name]
        assert f"![{caption}](figures/{path.name})" in text and f"*{caption}*" in text
        assert "SIMULATED" in Image.open(path).text["Title"], path.name
    real = _with_curves(make_study(tmp_path / "real", simulated=False))
    for path in fit_and_report(real).figures:
        assert "SIMULATED" not in Image.open(path).text["Title"], path.name


def test_loss_curves_are_grid_trials_in_one_panel_per_depth(tmp_path, monkeypatch):
    from dwtune.outputs.report import figures

    drawn = {}
    monkeypatch.setattr(figures, "save_png", lambda fig, path: drawn.setdefault(path.name, fig))
    exp = _with_curves(make_study(tmp_path / "exp"), refine_rows=2)
    from dwtune.storage.experiment import ExperimentReader

    reader = ExperimentReader(exp)
    experiment = reader.read()
    figures.plot_loss_curves(experiment, reader.curves(), exp / "5.png")
    fig = drawn["5.png"]
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_title().startswith("L = ")]
    assert [ax.get_title() for ax in panels] == [f"L = {d}" for d in DEPTHS]
    # depth 6's first budget's trials (both seeds) were relabelled refine: not drawn
    lines = {ax.get_title(): len(ax.get_lines()) for ax in panels}
    assert lines["L = 6"] == 2 * len(BUDGETS) - 2 and lines["L = 12"] == 2 * len(BUDGETS)


FLOOR_SPEC = """name: synthetic
trainer: simulated
data: {tokenizer: bpe, vocab_size: 2000, seq_len: 128}
model: {heads: 2, width_multiple: 2}
space: {depths: [6, 12, 18, 24, 30], budgets: [1e5, 1e10], seeds: 2}
refine: {pairs: [[6, 12], [12, 18]], seeds: 3}
train: {steps: 100, batch_size: 8}
resources: {gpu: 0.5}
"""


def test_the_report_prices_the_study_against_the_oracle_floor(tmp_path):
    from dwtune.core.budget import ModelShape, flops_per_token
    from dwtune.core.oracle_floor import oracle_floor
    from dwtune.core.spec import ExperimentSpec

    exp = make_study(tmp_path / "exp", spec=FLOOR_SPEC)
    trials = pd.read_parquet(exp / "trials.parquet")
    trials["tokens"] = 1e3
    trials["wall_time_s"] = 36.0
    trials.loc[0, "tokens"] = math.nan  # the diverged trial: no token count, no FLOPs
    trials.to_parquet(exp / "trials.parquet")
    found = pd.read_parquet(exp / "transitions.parquet")
    found["sigma_ln"] = [0.02 + 0.01 * i for i in range(len(found))]  # σ(ln N*) per pair
    found.to_parquet(exp / "transitions.parquet")
    text = fit_and_report(exp).report.read_text()
    section = text.partition("## Cost against the oracle floor")[2].partition("\n## ")[0]
    spent = sum(
        1e3 * flops_per_token(ModelShape(r.depth, r.width, 2, 2000, 128))
        for r in trials.iloc[1:].itertuples()
    )
    oracle = oracle_floor(ExperimentSpec.from_dict(yaml.safe_load(FLOOR_SPEC)), LEVINE2020)
    assert oracle.trainings == 2 * 2 * 3 and oracle.seeds == 3
    hours = len(trials) * 36.0 * 0.5 / 3600  # GPU-hours: wall time x resources.gpu
    assert f"spent {len(trials)} trainings, {spent:.3g} FLOPs ({hours:.3g} GPU-hours" in section
    eta = oracle.flops / spent
    assert 0.05 < eta < 0.5  # a readable η, not one that rounds to 0
    assert f"**η = floor FLOPs ÷ spent FLOPs = {100 * eta:.3g}%**" in section
    assert f"trainings per pair: {len(trials) / 2:,.1f} spent, 6 at the floor" in section
    assert "| 6-12 | 1.3e+07 |" in section and "| 12-18 | 3.79e+07 |" in section
    # the precision bought: the median σ(ln N*) of the bracketed pairs, hours per pair
    assert len(found) > 0
    assert (
        f"Precision: median σ(ln N*) = {found['sigma_ln'].median():.3g} e-folds over the bracketed "
        f"pairs, for {hours / 2:.3g} GPU-hours per pair." in section
    )


def test_the_report_without_token_counts_says_the_floor_was_not_computed(reported):
    exp, _ = reported  # its trials carry no tokens column
    text = (exp / "report.md").read_text()
    assert "## Cost against the oracle floor\n\nNot computed:" in text


def test_a_fit_json_from_an_earlier_interval_rule_is_described_by_its_own_rule():
    earlier = {"interval_quantile": 2.31, "interval_rule": "max(z, t_dof * sqrt(chi2_red))"}
    assert _quantile_note(earlier) == " ± 2.31 std. errors (max(z, t_dof * sqrt(chi2_red)))"
    current = {**earlier, "scale_prior_dof": 0.25}
    assert "a prior worth 0.25 pseudo-observations" in _quantile_note(current)
    assert _quantile_note({}) == " normal"
