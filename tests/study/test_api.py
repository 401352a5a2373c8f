"""The library API as a notebook uses it: plan, run (in process, no Ray), fit, project and
analyze a simulated study through ``dwtune.*`` only; what ``import dwtune`` costs and shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import dwtune

ROOT = Path(__file__).resolve().parents[2]
SIMULATED = ROOT / "search_spaces" / "simulated.yaml"
PLANTED_A, PLANTED_B = 5.039, 0.0555  # search_spaces/simulated.yaml
# simulated.yaml cut to 4 depths and 3 pairs so that it runs in process in seconds.
SMALLER = [
    "space.depths=[6, 12, 18, 24]",
    "refine.pairs=[[6, 12], [12, 18], [18, 24]]",
    "space.budgets={min: 1e6, max: 1e9, num: 7}",
    "refine.tolerance=0.2",
    "refine.max_rounds=4",
    "train.steps=200",
    "train.eval_every=100",
]


def test_a_notebook_plans_runs_fits_projects_and_analyses_through_dwtune(tmp_path):
    spec = dwtune.Spec.from_yaml(SIMULATED, overrides=SMALLER)
    assert repr(spec).startswith("<Spec 'simulated': trainer simulated, depths [6, 12, 18, 24]")

    plan = dwtune.plan(spec)
    cells = plan.to_frame()
    assert len(cells) == 4 * 7 and {"depth", "budget", "width", "regime"} <= set(cells.columns)
    assert "28 cells x 1 seed(s) = 28 trainings" in repr(plan)

    results = dwtune.Study(spec).run(storage=tmp_path, runner="local")
    assert set(results.tables) >= {"trials", "curves", "transitions", "pair_deltas"}
    for name in ("trials", "curves", "transitions", "pair_deltas", "projections"):
        assert len(getattr(results, name)) > 0, name
    assert results.fit.status == "fitted" and results.fit["b"] == results.fit.b
    assert "SIMULATED" in repr(results.fit) and len(results.fit.to_frame()) == 3

    law = dwtune.fit(results)
    assert law.a == pytest.approx(results.fit.a) and law.n_points == 3
    assert law.to_dict()["ci_b"][0] < PLANTED_B < law.to_dict()["ci_b"][1]
    assert repr(law).startswith("<Fit SIMULATED: ln dx* = 5.0")

    projected = results.project([1e11, 1e12])
    frame = projected.to_frame()
    assert list(frame["budget"]) == [1e11, 1e12] and (frame["depth"].diff().dropna() > 0).all()
    assert repr(projected).startswith("<Projections of ")
    assert law.project("175B")[0].depth == pytest.approx(results.project("175B").depth, rel=1e-6)
    published = dwtune.project([1.75e11], depths=[96])
    assert published.law.name == "levine2020" and 1e12 < published[1].n_star < 1.3e12

    analysis = dwtune.analyze(results.root, reference=law)
    pairs = analysis.to_frame()
    assert list(pairs["pair"]) == ["6-12", "12-18", "18-24"]
    assert "SIMULATED" in repr(analysis) and "fit of ln dx*" in str(analysis)

    reopened = dwtune.Study.open(results.root).results
    assert reopened.transitions.equals(results.transitions)


def test_import_dwtune_is_cheap_and_lists_its_api():
    code = (
        "import sys, dwtune; names = dir(dwtune); "
        "heavy = [m for m in ('torch', 'ray', 'optuna', 'pandas', 'matplotlib') "
        "if m in sys.modules]; print(heavy, 'plan' in names and 'Study' in names)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.stdout.strip() == "[] True", done.stderr
    assert set(dwtune.__all__) <= set(dir(dwtune))
    assert {"Spec", "Study", "plan", "fit", "project", "analyze"} <= set(dwtune.__all__)
    assert "dwtune.plan" in dwtune.__doc__ and "Study" in dwtune.__doc__


def test_spec_errors_come_together_from_the_library_too():
    raw = {"name": "x", "space": {"depths": "six"}, "train": {"stepz": 1}, "data": {"seq_len": 1}}
    with pytest.raises(dwtune.InputErrors) as caught:
        dwtune.Spec.from_dict(raw)
    assert len(caught.value.errors) == 3
    with pytest.raises(dwtune.InputError, match="did you mean 'steps'"):
        dwtune.Spec.from_yaml(SIMULATED, overrides=["train.stepz=3"])
    spec = dwtune.Spec.from_yaml(SIMULATED).with_overrides("space.seeds=2")
    assert spec.space.seeds == (0, 1) and spec.source.endswith("simulated.yaml")
