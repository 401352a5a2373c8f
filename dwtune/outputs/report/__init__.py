"""The study's report: report.md, figures and a TensorBoard summary of the fit.

The report only renders: it reads the tables and the fit stage's ``fit.json`` and
``projections.parquet`` (:mod:`.load`), draws (:mod:`.figures`) and writes Markdown
(:mod:`.markdown`). Partial studies (no transitions yet, fewer than 3 bracketed pairs, a slope
that is not positive) get a report that says plainly what was found, never a traceback.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dwtune.core.vocabulary import FIGURES_DIR, FIT_FILE, PROJECTIONS_FILE, REPORT_FILE
from dwtune.outputs import law_checks
from dwtune.outputs.lr_figure import plot_best_lr  # best rate against width
from dwtune.outputs.report.figures import draw_figures, new_figure, save_png
from dwtune.outputs.report.load import TB_FIT, cell_table, load_fit, load_study, table_budgets
from dwtune.outputs.report.markdown import _fit_section, _header, _markdown
from dwtune.storage.store import atomic_write_text


@dataclasses.dataclass(frozen=True)
class ReportFiles:
    report: Path
    fit_json: Path
    projections: Path
    figures: tuple[Path, ...]
    tensorboard: Path | None


# ---------------------------------------------------------------- TensorBoard


def write_tensorboard(exp_dir: Path, record: dict, fit_text: str) -> Path | None:
    """The fit as text and scalars under ``<exp_dir>/tb/fit`` (replacing earlier events)."""
    try:
        from dwtune.outputs.event_files import EventFile
    except ImportError:  # no tensorboardX
        return None
    folder = exp_dir / TB_FIT
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("events.out.tfevents.*"):
        old.unlink()  # one summary per report, not a history of reruns
    with EventFile(folder) as writer:
        writer.add_text("fit/summary", fit_text, 0)
        if record["status"] == "fitted":
            for key in ("a", "b", "se_a", "se_b", "r2", "chi2_red", "dof", "n_points"):
                writer.add_scalar(f"fit/{key}", float(record[key]), 0)
    return folder


def _law_checks_figure(study, outcome, record: dict) -> tuple[Path, ...]:
    """figures/6_law_checks.png from the checks the fit stage stored in fit.json."""
    if "law_checks" not in record or outcome.points is None:
        return ()
    checks = law_checks.LawChecks(record["law_checks"], outcome.points.observations)
    path = study.exp_dir / FIGURES_DIR / law_checks.FIGURE_NAME
    drawn = law_checks.draw(checks, path, lambda w, h: new_figure(w, h, study.simulated), save_png)
    return (drawn,) if drawn is not None else ()


def write_report(exp_dir: str | Path) -> ReportFiles:
    """report.md, figures/ and tb/fit for an experiment whose fit stage has run."""
    study = load_study(exp_dir)
    budgets, budget_note = table_budgets(study)
    if budget_note:
        study = dataclasses.replace(study, notes=(*study.notes, budget_note))
    cells = cell_table(study.completed)
    outcome, rows, record = load_fit(study)
    figures = plot_best_lr(study.exp_dir, draw_figures(study, outcome, rows, cells))
    figures += _law_checks_figure(study, outcome, record)
    fit_text = "\n".join(_header(study)[:3] + _fit_section(record, outcome))
    tb = write_tensorboard(study.exp_dir, record, fit_text)
    report = study.exp_dir / REPORT_FILE
    atomic_write_text(report, _markdown(study, outcome, cells, rows, budgets, record, figures, tb))
    projections = study.exp_dir / PROJECTIONS_FILE
    return ReportFiles(report, study.exp_dir / FIT_FILE, projections, figures, tb)
