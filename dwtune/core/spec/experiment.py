"""The whole study spec: its sections, the grid it implies and its resolved (plain) form."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

from dwtune.core.budget import GridCell, ModelShape, size_of, solve_width, training_flops
from dwtune.core.errors import InputError
from dwtune.core.spec.checks import as_plain
from dwtune.core.spec.sections import (
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

if TYPE_CHECKING:
    pass


@dataclass(frozen=True, repr=False)
class ExperimentSpec:
    """A validated study spec (``dwtune.Spec``): build it with
    [from_yaml][dwtune.core.spec.ExperimentSpec.from_yaml] or
    [from_dict][dwtune.core.spec.ExperimentSpec.from_dict], change it with
    [with_overrides][dwtune.core.spec.ExperimentSpec.with_overrides]; ``to_dict()`` is its resolved,
    YAML-safe form (what an experiment folder stores as spec.yaml)."""

    name: str
    space: SpaceConfig
    train: TrainConfig
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    refine: RefineConfig = field(default_factory=RefineConfig)
    fit: FitConfig = field(default_factory=FitConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    trackers: TrackersConfig = field(default_factory=TrackersConfig)
    trainer: str = "torch"
    simulated: SimulatedConfig = field(default_factory=SimulatedConfig)
    description: str = ""
    source: str = ""  # the file it came from (absolute); not part of any identity

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: Iterable[str] = ()) -> ExperimentSpec:
        """The spec in a YAML file, with ``KEY=VALUE`` overrides (``"train.steps=100"``)."""
        from dwtune.core.spec.load import load_spec

        return load_spec(path, overrides)

    @classmethod
    def from_dict(cls, raw: Mapping[str, object], overrides: Iterable[str] = ()) -> ExperimentSpec:
        """A spec from a mapping shaped like the YAML file (every error reported at once)."""
        from dwtune.core.spec.load import spec_from_dict

        return spec_from_dict(dict(raw), overrides=overrides)

    def with_overrides(self, *overrides: str) -> ExperimentSpec:
        """This spec with ``KEY=VALUE`` overrides applied and validated again."""
        from dwtune.core.spec.load import spec_from_dict

        return spec_from_dict(self.to_dict(), source=self.source, overrides=overrides)

    def __repr__(self) -> str:
        space, train = self.space, self.train
        length = (
            f"steps={train.steps}"
            if train.steps is not None
            else f"tokens={train.tokens}"
            if train.tokens is not None
            else f"tokens_per_param={train.tokens_per_param}"
        )
        return (
            f"<Spec {self.name!r}: trainer {self.trainer}, depths {list(space.depths)}, "
            f"{len(space.budgets)} budgets {min(space.budgets):.3g}..{max(space.budgets):.3g}, "
            f"{len(space.seeds)} seed(s), {length}, {len(self.refine.pairs)} refine pair(s)>"
        )

    def shape_template(self) -> ModelShape:
        return ModelShape(
            depth=1,
            width=self.model.head_dim or self.model.heads,
            heads=1 if self.model.head_dim else self.model.heads,
            vocab_size=self.data.vocab_size,
            seq_len=self.data.seq_len,
            mlp_ratio=self.model.mlp_ratio,
            tied_embeddings=self.model.tied_embeddings,
            bias=self.model.bias,
        )

    def shape_at(self, depth: int, width: int) -> ModelShape:
        """The model of ``depth`` blocks at ``width`` (heads = width / head_dim when the head
        width is fixed); InputError when head_dim does not divide the width."""
        head_dim = self.model.head_dim
        if head_dim and width % head_dim:
            raise InputError(
                f"model.head_dim: {head_dim} does not divide width {width}; use a width that "
                f"is a multiple of {head_dim}"
            )
        heads = width // head_dim if head_dim else self.model.heads
        return dataclasses.replace(self.shape_template(), depth=depth, width=width, heads=heads)

    def cell(self, depth: int, budget: float) -> GridCell:
        """The grid cell (shape at the budget-solving width) for one depth and budget."""
        return solve_width(
            self.shape_template(),
            depth,
            budget,
            self.model.width_multiple,
            self.model.size_convention,
            head_dim=self.model.head_dim,
            measure=self.training_flops if self.space.compare == "flops" else None,
        )

    def training_tokens(self, shape: ModelShape) -> int:
        """Tokens one training of ``shape`` sees: fixed steps or tokens, or tokens_per_param × N
        (N in the spec's size convention)."""
        train = self.train
        if train.tokens_per_param is not None:
            return round(train.tokens_per_param * size_of(shape, self.model.size_convention))
        return train.total_steps(self.data.seq_len) * train.batch_size * self.data.seq_len

    def training_steps(self, shape: ModelShape) -> int:
        """Optimizer steps of one training of ``shape``."""
        if self.train.steps is not None:
            return self.train.steps
        per_step = self.train.batch_size * self.data.seq_len
        return max(1, self.training_tokens(shape) // per_step)

    def training_flops(self, shape: ModelShape) -> float:
        """Training FLOPs of one training of ``shape`` (the budget when space.compare: flops)."""
        return training_flops(shape, self.training_tokens(shape))

    def grid(self) -> list[GridCell]:
        """The cells the grid stage trains: the first wave's first cells, as the design the
        spec names places them (``dwtune.core.refine.design``)."""
        from dwtune.core.refine.design import design_for

        return design_for(self).first_wave_cells()

    def first_cells(self) -> list[GridCell]:
        """Every pair's first cells, each wave's as fit.reference places them (what
        ``dwtune plan`` checks against the GPU's memory; ``dwtune.core.refine.design``)."""
        from dwtune.core.refine.design import design_for

        return design_for(self).first_cells()

    def to_dict(self) -> dict[str, object]:
        """Plain, YAML-safe resolved spec (every default filled in)."""
        raw = dataclasses.asdict(self)
        raw.pop("source")
        if self.model.head_dim is not None:  # heads follow the width: only head_dim is given
            raw["model"].pop("heads")
        return cast("dict[str, object]", as_plain(raw))  # as_plain keeps a dict a dict
