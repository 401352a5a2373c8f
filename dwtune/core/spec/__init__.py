"""Experiment specs (pure): YAML in ``search_spaces/`` parsed once into frozen, typed configs."""

from dwtune.core.spec.experiment import ExperimentSpec
from dwtune.core.spec.load import load_spec, spec_from_dict
from dwtune.core.spec.sections import (
    BUILTIN_CORPORA,
    REFERENCE_FITS,
    SCHEDULES,
    SPLIT_FIELDS,
    TOKENIZERS,
    TRAINERS,
    DataConfig,
    FitConfig,
    ModelConfig,
    RefineConfig,
    ResourcesConfig,
    SimulatedConfig,
    SpaceConfig,
    TrackersConfig,
    TrainConfig,
)

__all__ = [
    "BUILTIN_CORPORA",
    "REFERENCE_FITS",
    "SCHEDULES",
    "SPLIT_FIELDS",
    "TOKENIZERS",
    "TRAINERS",
    "DataConfig",
    "ExperimentSpec",
    "FitConfig",
    "ModelConfig",
    "RefineConfig",
    "ResourcesConfig",
    "SimulatedConfig",
    "SpaceConfig",
    "TrackersConfig",
    "TrainConfig",
    "load_spec",
    "spec_from_dict",
]
