"""The library API a notebook uses: ``dwtune.plan``, ``dwtune.fit``, ``dwtune.project``,
``dwtune.analyze`` and the result objects they return (each with ``to_frame()``, ``to_dict()``
and a one-line repr). ``dwtune.Study`` (:mod:`dwtune.study.pipeline`) runs a study.

    import dwtune

    spec = dwtune.Spec.from_yaml("search_spaces/simulated.yaml", overrides=["space.seeds=2"])
    dwtune.plan(spec).to_frame()                        # every model the study trains
    results = dwtune.Study(spec).run(storage="experiments")
    law = dwtune.fit(results)                           # ln dx* = a + b·L, with errors
    law.project([1e11, 1e12]).to_frame()                # optimal depth and width there
    dwtune.analyze(results.root).to_frame()             # N* per pair, from the trials alone

Every function takes what the matching command takes (a spec file or mapping, an experiment
directory, a table of runs) and raises :class:`~dwtune.core.errors.InputError` for bad input,
with the message the command prints. Nothing here imports torch or Ray.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dwtune.core.errors import InputError, numeric_input
from dwtune.core.projection import (
    BudgetProjection,
    DepthProjection,
    DepthWidthLaw,
    project_budget,
    project_depth,
    reference,
)
from dwtune.core.spec import ExperimentSpec, load_spec, spec_from_dict
from dwtune.core.units import format_size, parse_size
from dwtune.core.vocabulary import LEVEL, SIMULATED_COLUMN
from dwtune.study.planning import Plan, make_plan

if TYPE_CHECKING:
    import pandas as pd

    from dwtune.core.analysis.result import AnalysisResult
    from dwtune.core.fit import FitResult

SpecLike = ExperimentSpec | Mapping[str, Any] | str | Path


def table_records(frame: pd.DataFrame) -> list[dict]:
    """A DataFrame as JSON-ready row dicts (numpy scalars as numbers, NaN as null)."""
    return json.loads(frame.to_json(orient="records"))


def as_spec(spec: SpecLike, overrides: Iterable[str] = ()) -> ExperimentSpec:
    """A spec object, a raw mapping or a YAML path, validated with ``KEY=VALUE`` overrides."""
    overrides = list(overrides)
    if isinstance(spec, ExperimentSpec):
        return spec.with_overrides(*overrides) if overrides else spec
    if isinstance(spec, Mapping):
        return spec_from_dict(dict(spec), overrides=overrides)
    return load_spec(spec, overrides)


# --------------------------------------------------------------------------- plan


def plan(
    spec: SpecLike,
    overrides: Iterable[str] = (),
    *,
    device: str | None = None,
    cost: bool = False,
    peak_flops: float | None = None,
    mfu: float | None = None,
    gpus: int = 1,
) -> Plan:
    """Every model ``spec`` trains, the corpus against the training length, GPU packing and
    (``cost=True``) FLOPs, GPU-hours and wall time: what ``dwtune plan`` prints."""
    return make_plan(as_spec(spec, overrides), device, cost, peak_flops, mfu, gpus)


# --------------------------------------------------------------------------- fit, project


class Projections:
    """Optimal depth and width per budget, and the transition size per depth, of one law."""

    def __init__(
        self,
        law: DepthWidthLaw,
        budgets: Sequence[BudgetProjection] = (),
        depths: Sequence[DepthProjection] = (),
    ):
        self.law, self.budgets, self.depths = law, list(budgets), list(depths)

    def to_frame(self) -> pd.DataFrame:
        """One row per budget (``kind`` budget) then per depth (``kind`` depth)."""
        import pandas as pd

        rows = [{"kind": "budget", **asdict(p)} for p in self.budgets]
        rows += [{"kind": "depth", **asdict(p)} for p in self.depths]
        return pd.DataFrame(rows)

    def to_dict(self) -> dict:
        from dwtune.storage.fit_json import json_ready

        out = {"law": asdict(self.law), "budgets": [asdict(p) for p in self.budgets]}
        return json_ready(out | {"depths": [asdict(p) for p in self.depths]})  # type: ignore[return-value]

    def __len__(self) -> int:
        return len(self.budgets) + len(self.depths)

    def __getitem__(self, index: int) -> BudgetProjection | DepthProjection:
        return [*self.budgets, *self.depths][index]

    def __repr__(self) -> str:
        shown = [
            f"{format_size(p.budget)}: depth {p.depth:.1f}, width {p.width:,.0f}"
            for p in self.budgets
        ]
        shown += [f"depth {p.depth:g}: N* {format_size(p.n_star)}" for p in self.depths]
        return f"<Projections of {self.law.name}: {'; '.join(shown) or 'none'}>"


def _sizes(values: float | str | Iterable[float | str] | None, field: str) -> list[float]:
    if values is None:
        return []
    if isinstance(values, str | int | float):
        values = [values]
    return [parse_size(v, field=field) for v in values]


def project_law(
    law: DepthWidthLaw,
    budgets: float | str | Iterable[float | str] | None = None,
    depths: float | Iterable[float] | None = None,
    level: float = LEVEL,
) -> Projections:
    """``law`` projected at each budget (parameters, or sizes such as '175B') and depth."""
    depth_list = [depths] if isinstance(depths, int | float) else list(depths or ())
    for depth in depth_list:
        if not (math.isfinite(depth) and depth > 0):
            raise InputError(f"depths: got {depth!r}; expected positive numbers of layers")
    with numeric_input(law.source or law.name, "use smaller budgets or depths"):
        by_budget = [project_budget(law, n, level) for n in _sizes(budgets, "budgets")]
        by_depth = [project_depth(law, float(d), level) for d in depth_list]
    return Projections(law, by_budget, by_depth)


class Fit:
    """A fitted law ``ln dx* = a + b·L``: coefficients, errors, intervals and quality
    (``to_dict()`` is fit.json's content; ``to_frame()`` the fitted points)."""

    def __init__(self, result: FitResult, record: dict, law: DepthWidthLaw, level: float):
        self.result, self.record, self.law, self.level = result, record, law, level

    def __getattr__(self, name: str) -> Any:  # a, b, se_a, r2, chi2_red, ... of the fit
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.result, name)

    def to_dict(self) -> dict:
        return dict(self.record)

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.record["points"])

    def project(
        self,
        budgets: float | str | Iterable[float | str] | None = None,
        depths: float | Iterable[float] | None = None,
    ) -> Projections:
        return project_law(self.law, budgets, depths, self.level)

    def __repr__(self) -> str:
        r = self.result
        tag = " SIMULATED" if self.record.get(SIMULATED_COLUMN) else ""
        return (
            f"<Fit{tag}: ln dx* = {r.a:.3f}(±{r.se_a:.3f}) + {r.b:.4f}(±{r.se_b:.4f})·L from "
            f"{r.n_points} transitions ({r.method}), R²={r.r2:.3f}, χ²_red={r.chi2_red:.2f}>"
        )


def fit(source: object, level: float = LEVEL) -> Fit:
    """Fit ``ln dx* = a + b·L``: ``source`` is an experiment directory (or a Study, or its
    results), its transitions.parquet, or a CSV of depth,width,width_err (``dwtune fit``)."""
    from dwtune.core.fit import z_value
    from dwtune.storage.fit_json import fit_to_dict
    from dwtune.storage.fit_points import load_fit_input

    z_value(level)  # a bad level fails before any file is read
    points = load_fit_input(_path_of(source))
    with numeric_input(points.source, "check its depth, width and width_err values"):
        result = points.fit()
    record = fit_to_dict(result, level, points.simulated, points.source, points.seeds)
    return Fit(result, record, DepthWidthLaw.from_fit(result, source=points.source), level)


def _path_of(source: object) -> Path:
    if isinstance(source, str | Path):
        return Path(source)
    root = getattr(source, "root", None)  # StudyResults
    if root is None and hasattr(source, "results"):  # Study
        root = source.results.root  # type: ignore[attr-defined]
    return Path(root if root is not None else source)  # type: ignore[arg-type]


def law_of(law: object = None) -> DepthWidthLaw:
    """A law: a published one by name (default levine2020), a :class:`Fit`, a DepthWidthLaw,
    or an experiment directory / fit.json / transitions table to fit."""
    if law is None or (isinstance(law, str) and "/" not in law and not Path(law).exists()):
        return reference(law or "levine2020")
    if isinstance(law, DepthWidthLaw):
        return law
    if isinstance(law, Fit):
        return law.law
    path = _path_of(law)
    if path.suffix == ".json":
        from dwtune.storage.fit_json import law_from_json

        return law_from_json(path)[0]
    return fit(path).law


def project(
    budgets: float | str | Iterable[float | str] | None = None,
    depths: float | Iterable[float] | None = None,
    law: object = None,
    level: float = LEVEL,
) -> Projections:
    """Optimal depth and width per budget, transition size per depth (``dwtune project``).
    ``law``: levine2020 (default), a :class:`Fit`, or an experiment directory to fit."""
    return project_law(law_of(law), budgets, depths, level)


# --------------------------------------------------------------------------- analyze


class Analysis:
    """``dwtune analyze``'s result: per depth pair its status and N* with intervals, the noise,
    the reference law's test and the fit (``to_dict()`` is ``analyze --json``)."""

    def __init__(self, result: AnalysisResult):
        self.result = result

    @property
    def pairs(self) -> list[dict]:
        return self.to_dict()["pairs"]

    def to_dict(self) -> dict:
        from dwtune.outputs.analysis_json import analysis_dict

        return analysis_dict(self.result)

    def to_frame(self) -> pd.DataFrame:
        """One row per depth pair (points, noise and trend left out: see ``to_dict()``)."""
        import pandas as pd

        keep = ("points", "noise", "trend", "crossings")
        return pd.DataFrame([{k: v for k, v in p.items() if k not in keep} for p in self.pairs])

    def __str__(self) -> str:
        from dwtune.outputs.analysis_text import format_analysis

        return format_analysis(self.result)

    def __repr__(self) -> str:
        pairs = ", ".join(f"{p.analysis.label} {p.analysis.status}" for p in self.result.pairs)
        tag = " SIMULATED" if self.result.simulated else ""
        return f"<Analysis{tag} of {self.result.source}: {pairs or 'no pairs'}>"


def analyze(
    runs: object,
    pairs: str | None = None,
    columns: str | Mapping[str, str] | None = None,
    tokens: float | str | None = None,
    window: float = 0.25,
    reference: object = None,
    alpha: float = 0.05,
) -> Analysis:
    """Transitions in a table of runs (CSV, Parquet, a DataFrame's file, or an experiment
    directory): ``dwtune analyze`` with the same options; ``reference`` is a law as in
    :func:`project` (levine2020, a Fit, an experiment directory)."""
    from dwtune.core.analysis import parse_pairs
    from dwtune.core.analysis.pipeline import analyse
    from dwtune.core.analysis.result import Reference
    from dwtune.storage.runs import load_runs, parse_columns

    mapping = dict(columns) if isinstance(columns, Mapping) else parse_columns(columns)
    count = parse_size(tokens, field="tokens") if tokens is not None else None
    if not (0 < alpha < 0.5 and window >= 0):
        raise InputError(f"alpha, window: got {alpha!r}, {window!r}; expected 0 < alpha < 0.5")
    ref = None
    if reference is not None:
        law = law_of(reference)
        ref = Reference(law, law.name)
    loaded = load_runs(_path_of(runs), mapping, count)
    result = analyse(
        loaded.table,
        loaded.source,
        loaded.simulated,
        pairs=parse_pairs(pairs) if pairs else None,
        window=window,
        tokens=count,
        ref=ref,
        alpha=alpha,
    )
    return Analysis(result)
