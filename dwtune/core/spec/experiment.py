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
    TrainConfig,
)
from dwtune.core.vocabulary import Design

if TYPE_CHECKING:
    from dwtune.core.projection import DepthWidthLaw


@dataclass(frozen=True, repr=False)
class ExperimentSpec:
    """A validated study spec (``dwtune.Spec``): build it with :meth:`from_yaml` or
    :meth:`from_dict`, change it with :meth:`with_overrides`; ``to_dict()`` is its resolved,
    YAML-safe form (what an experiment folder stores as spec.yaml)."""

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
        """The cells the grid stage trains: every depth at every budget (``refine.design:
        grid``), or the first points of the first wave's pairs (``law``, :meth:`wave_cells`)."""
        if self.refine.design != Design.LAW:
            return [self.cell(d, n) for d in sorted(self.space.depths) for n in self.space.budgets]
        return self.wave_cells(self.refine_waves()[0])

    def first_cells(self) -> list[GridCell]:
        """Every pair's first cells, each wave's placed by fit.reference: the grid stage's
        (:meth:`grid`) and the later waves' as the reference places them (the running fit
        moves those), which ``dwtune plan`` checks against the GPU's memory."""
        if self.refine.design != Design.LAW:
            return self.grid()
        return self.wave_cells(self.refine.pairs)

    def refine_waves(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        """refine.pairs in refine.waves runs that refine one after another: ranked by their
        deeper (then shallower) depth and cut into runs of near-equal size, the first runs
        the larger; each run lists its pairs in refine.pairs' order. One wave (and the grid
        design's, whose first points are every budget anyway): every pair."""
        pairs = [(int(shallow), int(deep)) for shallow, deep in self.refine.pairs]
        if self.refine.design != Design.LAW:
            return (tuple(pairs),)
        ranked = sorted(pairs, key=lambda pair: (pair[1], pair[0]))
        count = self.refine.waves
        size, extra = divmod(len(ranked), count)
        waves: list[tuple[tuple[int, int], ...]] = []
        start = 0
        for index in range(count):
            stop = start + size + (1 if index < extra else 0)
            members = set(ranked[start:stop])
            waves.append(tuple(pair for pair in pairs if pair in members))
            start = stop
        return tuple(waves)

    def wave_cells(
        self,
        pairs: Iterable[tuple[int, int]],
        law: DepthWidthLaw | None = None,
        earlier: Mapping[int, Iterable[float]] | None = None,
    ) -> list[GridCell]:
        """The first points of a wave's ``pairs`` (law design): each depth at its
        :meth:`depth_budgets` by ``law`` (default fit.reference); ``earlier``: the sizes each
        depth was given by the waves before."""
        pairs = tuple(pairs)
        depths = sorted({d for pair in pairs for d in pair})
        earlier = earlier or {}
        return [
            self.cell(d, n)
            for d in depths
            for n in self.depth_budgets(d, pairs, law, earlier.get(d, ()))
        ]

    def depth_budgets(
        self,
        depth: int,
        pairs: Iterable[tuple[int, int]] | None = None,
        law: DepthWidthLaw | None = None,
        earlier: Iterable[float] = (),
    ) -> tuple[float, ...]:
        """Every budget a wave's first points train ``depth`` at, sorted: ``space.budgets``
        (grid design); in the law design the budgets of the wave's ``pairs`` (default: the
        first wave's) it belongs to, placed by ``law``, and, where it is the shallower net of
        a pair and would have fewer than three sizes with the ``earlier`` waves' (a study's
        shallowest depth), that pair's law N* too. Why: Δ is moved to equal N along the
        shallower depth's size trend, and two sizes show no bend: on paper.yaml's simulated
        twin with b 30% below the reference, pair 6-12's N* lay near its lower law size, where
        the secant's slope is 3-4% off, and its 95% intervals held N* in 81% of 100 studies;
        with the third size 88%, and 92% once the chord's kink correction waited for a kink
        beyond noise (``benchmarks/study_coverage.py``; :mod:`dwtune.core.crossing`)."""
        if self.refine.design != Design.LAW:
            return tuple(sorted(self.space.budgets))
        wave = self.refine_waves()[0] if pairs is None else tuple(pairs)
        members = [pair for pair in wave if depth in pair]
        budgets = {n for pair in members for n in self.pair_budgets(pair, law)}
        if len(budgets | set(earlier)) < 3:
            budgets |= {self.law_centre(pair, law) for pair in members if pair[0] == depth}
        return tuple(sorted(budgets))

    def shallow_budgets(
        self,
        pair: tuple[int, int],
        law: DepthWidthLaw | None = None,
        earlier: Iterable[float] = (),
    ) -> tuple[float, ...]:
        """The sizes of a pair's shallower-depth size trend, sorted: the pair's budgets, and
        its law N* where its wave trains the shallower net there (:meth:`depth_budgets`).
        Not every size the depth is trained at: two neighbouring pairs' law sizes may lie a
        few hundredths of an e-fold apart, and the slope between their noisy means was worse
        than none (paper.yaml's twin at b − 30%: pair 18-24's 95% coverage 89% against 96%)."""
        budgets = set(self.pair_budgets(pair, law))
        if self.refine.design != Design.LAW:
            return tuple(sorted(budgets))
        wave = next(w for w in self.refine_waves() if tuple(pair) in w)
        centre = self.law_centre(pair, law)
        if centre in self.depth_budgets(pair[0], wave, law, earlier):
            budgets.add(centre)
        return tuple(sorted(budgets))

    def law_centre(self, pair: tuple[int, int], law: DepthWidthLaw | None = None) -> float:
        """``law``'s N* of a refine pair (its deeper depth; default fit.reference), within
        space.budgets."""
        from dwtune.core.projection import transition_size

        return self._within_budgets(transition_size(self._law(law), pair[1]))

    def _law(self, law: DepthWidthLaw | None) -> DepthWidthLaw:
        from dwtune.core.projection import reference

        return reference(self.fit.reference) if law is None else law

    def _within_budgets(self, size: float) -> float:
        """``size`` clamped to space.budgets' range (what the law design may reach)."""
        return min(max(size, min(self.space.budgets)), max(self.space.budgets))

    def pair_budgets(
        self, pair: tuple[int, int], law: DepthWidthLaw | None = None
    ) -> tuple[float, ...]:
        """Where a refine pair's first points lie: every ``space.budgets`` (grid design), or
        the law design's two sizes around ``law``'s N* (default fit.reference; core/design.py),
        kept within space.budgets' range."""
        if self.refine.design != Design.LAW:
            return self.space.budgets
        from dwtune.core.refine.design import law_sizes

        sizes = law_sizes(self._law(law), pair[1], self.refine.reach)
        return tuple(self._within_budgets(size) for size in sizes)

    def to_dict(self) -> dict[str, object]:
        """Plain, YAML-safe resolved spec (every default filled in)."""
        raw = dataclasses.asdict(self)
        raw.pop("source")
        if self.model.head_dim is not None:  # heads follow the width: only head_dim is given
            raw["model"].pop("heads")
        return cast("dict[str, object]", as_plain(raw))  # as_plain keeps a dict a dict
