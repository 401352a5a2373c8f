"""dwtune: how deep, how wide? Depth-to-width studies of Transformer LMs at fixed budgets.

The library API (each name imported on first use, so ``import dwtune`` stays cheap: no pandas,
Ray, torch or Optuna until a function needs them):

- ``dwtune.Spec``: a validated spec; ``Spec.from_yaml(path, overrides=[...])``,
  ``Spec.from_dict(mapping)``, ``spec.with_overrides("train.steps=100")``.
- ``dwtune.plan(spec)``: every model a study trains, corpus, packing, cost (a ``Plan``).
- ``dwtune.Study``: runs a study (``Study(spec).run(storage=...)``) or opens one
  (``Study.open(folder).results``: trials, curves, transitions, pair_deltas, projections, fit).
- ``dwtune.fit(folder)``: the law ln dx* = a + b·L (a ``Fit``; ``fit.project([1e11, 1e12])``).
- ``dwtune.project(budgets, depths, law=...)``: optimal depth and width (``Projections``).
- ``dwtune.analyze(runs)``: transitions in runs dwtune did not train (an ``Analysis``).

Every result has ``to_frame()`` (a pandas DataFrame) and ``to_dict()`` (the command's
``--json``). Bad input raises ``dwtune.InputError`` with the message the CLI prints.
"""

import importlib

__version__ = "0.1.0"

# name -> the module that defines it (imported on first access)
_EXPORTS = {
    "Spec": "dwtune.core.spec",
    "InputError": "dwtune.core.errors",
    "InputErrors": "dwtune.core.errors",
    "Study": "dwtune.study.pipeline",
    "StudyResults": "dwtune.study.pipeline",
    "plan": "dwtune.study.api",
    "fit": "dwtune.study.api",
    "project": "dwtune.study.api",
    "analyze": "dwtune.study.api",
    "Plan": "dwtune.study.planning",
    "Fit": "dwtune.study.api",
    "Projections": "dwtune.study.api",
    "Analysis": "dwtune.study.api",
}
_RENAMED = {"Spec": "ExperimentSpec"}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dwtune' has no attribute {name!r}")
    return getattr(importlib.import_module(module), _RENAMED.get(name, name))


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
