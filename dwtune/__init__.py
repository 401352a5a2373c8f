"""dwtune: how deep, how wide? Depth-to-width studies of Transformer LMs at fixed budgets.

``dwtune.Study`` (:mod:`dwtune.study.pipeline`) runs a study from Python; it is imported on first
use, so ``import dwtune`` stays cheap (no pandas, Ray, torch or Optuna).
"""

__version__ = "0.1.0"
__all__ = ["Study", "StudyResults", "__version__"]


def __getattr__(name: str):
    if name in ("Study", "StudyResults"):
        from dwtune.study import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'dwtune' has no attribute {name!r}")
