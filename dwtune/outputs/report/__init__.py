"""The study's report: report.md, figures and a TensorBoard summary of the fit.

The report only renders: the store reads the tables and the fit stage's ``fit.json`` and
``projections.parquet`` (:class:`~dwtune.storage.experiment.ExperimentReader`); the report
draws (:mod:`.figures`) and writes Markdown (:mod:`.markdown`). Partial studies (no transitions
yet, fewer than 3 bracketed pairs, a slope that is not positive) get a report that says plainly
what was found, never a traceback.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dwtune.core.vocabulary import (
    FIGURES_DIR,
    FIT_FILE,
    PROJECTIONS_FILE,
    REPORT_FILE,
    SIMULATED_TITLE,
    Figure,
)
from dwtune.outputs.report import law_checks
from dwtune.outputs.report.cells import cell_table
from dwtune.outputs.report.figures import draw_figures, new_figure, save_png
from dwtune.outputs.report.lr_figure import plot_best_lr  # best rate against width
from dwtune.outputs.report.markdown import _fit_section, _header, _markdown
from dwtune.outputs.tensorboard import write_fit_board
from dwtune.storage.experiment import Experiment, ExperimentReader
from dwtune.storage.fit_json import FitOutcome
from dwtune.storage.store import atomic_write_text


@dataclasses.dataclass(frozen=True)
class ReportFiles:
    report: Path
    fit_json: Path
    projections: Path
    figures: tuple[Path, ...]
    tensorboard: Path | None


def _law_checks_figure(
    experiment: Experiment, outcome: FitOutcome, record: dict
) -> tuple[Path, ...]:
    """figures/``Figure.LAW_CHECKS`` from the checks the fit stage stored in fit.json."""
    if "law_checks" not in record or outcome.points is None:
        return ()
    checks = law_checks.LawChecks(record["law_checks"], outcome.points.observations)
    path = experiment.root / FIGURES_DIR / Figure.LAW_CHECKS
    simulated = experiment.simulated
    title = f"{experiment.name}: law checks"
    title = SIMULATED_TITLE.format(title) if simulated else title

    def titled(width: float, height: float):
        fig = new_figure(width, height, simulated)
        fig.suptitle(title, color="red" if simulated else "black", fontsize=12)
        return fig

    drawn = law_checks.draw(checks, path, titled, save_png)
    return (drawn,) if drawn is not None else ()


def write_report(exp_dir: str | Path) -> ReportFiles:
    """report.md, figures/ and tb/fit for an experiment whose fit stage has run."""
    reader = ExperimentReader(exp_dir)
    experiment = reader.read()
    budgets, budget_note = experiment.fit_budgets()
    if budget_note:
        experiment = dataclasses.replace(experiment, notes=(*experiment.notes, budget_note))
    cells = cell_table(experiment.completed)
    outcome, record = reader.fit(experiment)
    rows = reader.projections()
    figures = draw_figures(experiment, outcome, rows, cells, reader.curves())
    figures = plot_best_lr(experiment, figures)
    figures += _law_checks_figure(experiment, outcome, record)
    fit_text = "\n".join(_header(experiment)[:3] + _fit_section(record, outcome))
    tb = write_fit_board(experiment.root, record, fit_text)
    text = _markdown(experiment, outcome, cells, rows, budgets, record, figures, tb)
    report = reader.path(REPORT_FILE)
    atomic_write_text(report, text)
    return ReportFiles(report, reader.path(FIT_FILE), reader.path(PROJECTIONS_FILE), figures, tb)
