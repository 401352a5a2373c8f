"""The whole study spec: its sections, the grid it implies and its resolved (plain) form."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from dwtune.core.budget import GridCell, ModelShape, solve_width
from dwtune.core.spec.checks import as_plain
from dwtune.core.spec.sections import (
    DataConfig,
    FitConfig,
    ModelConfig,
    RefineConfig,
    ResourcesConfig,
    SimulatedConfig,
    SpaceConfig,
    TrainConfig,
)


@dataclass(frozen=True)
class ExperimentSpec:
    name: str
    space: SpaceConfig
    train: TrainConfig
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    refine: RefineConfig = field(default_factory=RefineConfig)
    fit: FitConfig = field(default_factory=FitConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    trainer: str = "torch"
    simulated: SimulatedConfig = field(default_factory=SimulatedConfig)
    description: str = ""
    source: str = ""  # the file it came from (absolute); not part of any identity

    def shape_template(self) -> ModelShape:
        return ModelShape(
            depth=1,
            width=self.model.heads,
            heads=self.model.heads,
            vocab_size=self.data.vocab_size,
            seq_len=self.data.seq_len,
            mlp_ratio=self.model.mlp_ratio,
            tied_embeddings=self.model.tied_embeddings,
            bias=self.model.bias,
        )

    def cell(self, depth: int, budget: float) -> GridCell:
        """The grid cell (shape at the budget-solving width) for one depth and budget."""
        return solve_width(
            self.shape_template(),
            depth,
            budget,
            self.model.width_multiple,
            self.model.size_convention,
        )

    def grid(self) -> list[GridCell]:
        return [self.cell(d, n) for d in sorted(self.space.depths) for n in self.space.budgets]

    def to_dict(self) -> dict:
        """Plain, YAML-safe resolved spec (every default filled in)."""
        raw = dataclasses.asdict(self)
        raw.pop("source")
        return as_plain(raw)
