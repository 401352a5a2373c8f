"""Budget math (pure): exact parameter counts, width solving and FLOPs per token.

The model that :mod:`dwtune.backends.pytorch.model` builds is fixed by a
:class:`ModelShape`. Its parameters, per
block (pre-LayerNorm, ``d`` = width, ``h`` = MLP hidden width):

- LayerNorm x2: ``2d`` weights (+ ``2d`` biases with ``bias``)
- attention: fused QKV ``3d²`` and output projection ``d²`` (+ ``3d + d`` biases)
- MLP: ``d·h + h·d`` (+ ``h + d`` biases)

plus a final LayerNorm (``d`` [+ ``d``]), token embeddings ``V·d``, learned positions ``T·d`` and,
when embeddings are untied, an output head ``V·d`` (never a bias). With ``mlp_ratio = 4`` and no
biases the blocks hold ``12·L·d²`` weights plus LayerNorms: the paper's convention.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from dwtune.core.errors import InputError
from dwtune.core.vocabulary import SizeConvention

SIZE_CONVENTIONS = tuple(SizeConvention)
# Rounded widths further than this from the budget get a note in the plan.
BUDGET_TOLERANCE = 0.02
# A budget is "too small" for a depth when even the narrowest legal width overshoots it by more
# than this factor: the grid cell would then measure a different size than asked for.
TOO_SMALL_FACTOR = 1.5


@dataclass(frozen=True)
class ModelShape:
    """Everything that fixes the parameter count (and the trainer's module layout)."""

    depth: int
    width: int
    heads: int
    vocab_size: int
    seq_len: int
    mlp_ratio: float = 4.0
    tied_embeddings: bool = True
    bias: bool = False

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def mlp_hidden(self) -> int:
        return round(self.mlp_ratio * self.width)


@dataclass(frozen=True)
class ParamCount:
    total: int
    blocks: int  # all transformer blocks, LayerNorms included
    final_norm: int
    token_embedding: int
    position_embedding: int
    head: int  # 0 when tied to the token embedding

    @property
    def non_embedding(self) -> int:
        """Exact count without token, position and head matrices (Kaplan et al. convention)."""
        return self.blocks + self.final_norm


def block_params(shape: ModelShape) -> int:
    d, h = shape.width, shape.mlp_hidden
    norms = 2 * d * (2 if shape.bias else 1)
    attention = 4 * d * d + (4 * d if shape.bias else 0)
    mlp = 2 * d * h + ((h + d) if shape.bias else 0)
    return norms + attention + mlp


def count_params(shape: ModelShape) -> ParamCount:
    d = shape.width
    token = shape.vocab_size * d
    parts = {
        "blocks": shape.depth * block_params(shape),
        "final_norm": d * (2 if shape.bias else 1),
        "token_embedding": token,
        "position_embedding": shape.seq_len * d,
        "head": 0 if shape.tied_embeddings else token,
    }
    return ParamCount(total=sum(parts.values()), **parts)


def paper_size(depth: int, width: int) -> int:
    """The paper's size convention: N = 12·L·dx² (non-embedding parameters)."""
    return 12 * depth * width * width


def size_of(shape: ModelShape, convention: str) -> int:
    """The size a budget is measured in: paper convention, or the exact total count."""
    if convention == SizeConvention.NON_EMBEDDING:
        return paper_size(shape.depth, shape.width)
    if convention == SizeConvention.TOTAL:
        return count_params(shape).total
    raise InputError(f"size convention {convention!r} unknown; use one of {SIZE_CONVENTIONS}")


def width_step(heads: int, width_multiple: int) -> int:
    """Smallest width granularity: divisible by the head count and the alignment."""
    return math.lcm(heads, width_multiple)


def flops_per_token(shape: ModelShape) -> float:
    """Training FLOPs per token: 6 × matmul parameters + causal-unmasked attention term.

    Matmul parameters are the blocks' weights plus the output head (``V·d``, also when tied);
    the attention scores and weighted sum cost ``2·2·T·d`` per layer forward, times 3 for
    forward + backward, i.e. ``12·L·T·d`` (nanoGPT / PaLM convention, no causal halving).
    """
    matmul_params = count_params(shape).non_embedding + shape.vocab_size * shape.width
    return 6.0 * matmul_params + 12.0 * shape.depth * shape.seq_len * shape.width


@dataclass(frozen=True)
class GridCell:
    depth: int
    budget: float
    shape: ModelShape
    size: float  # in the spec's convention (training FLOPs when space.compare is flops)
    params_non_embedding: int  # paper convention 12·L·dx²
    params_total: int

    @property
    def budget_error(self) -> float:
        """Relative error of the achieved size against the budget (signed)."""
        return (self.size - self.budget) / self.budget


def _shape_at(
    template: ModelShape, depth: int, width: int, head_dim: int | None = None
) -> ModelShape:
    heads = width // head_dim if head_dim else template.heads
    return dataclasses.replace(template, depth=depth, width=width, heads=heads)


def solve_width(
    template: ModelShape,
    depth: int,
    budget: float,
    width_multiple: int,
    convention: str,
    *,
    head_dim: int | None = None,
    measure: Callable[[ModelShape], float] | None = None,
) -> GridCell:
    """The legal width whose size is closest to ``budget`` at ``depth``.

    Sizes grow monotonically with width, so a doubling search then a bisection over multiples
    of the width step finds the bracketing pair; the closer of the two wins (ties go narrower).
    ``head_dim`` fixes the head width instead of the head count (heads = width / head_dim);
    ``measure`` replaces the size convention (equal-FLOPs studies pass training FLOPs).
    """
    step = width_step(head_dim or template.heads, width_multiple)

    def size(k: int) -> float:
        shape = _shape_at(template, depth, k * step, head_dim)
        return measure(shape) if measure else size_of(shape, convention)

    low, high = 1, 1
    while size(high) < budget:
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if size(mid) < budget else (low, mid)
    k = low if abs(size(low) - budget) <= abs(size(high) - budget) else high
    if k == 1 and size(1) > TOO_SMALL_FACTOR * budget:
        raise InputError(
            f"budget {budget:.3g} is too small for depth {depth}: the narrowest width "
            f"{step} already has {size(1):.3g} parameters; raise the budget or drop the depth"
        )
    shape = _shape_at(template, depth, k * step, head_dim)
    return GridCell(
        depth=depth,
        budget=float(budget),
        shape=shape,
        size=size(k),
        params_non_embedding=paper_size(depth, shape.width),
        params_total=count_params(shape).total,
    )


def training_flops(shape: ModelShape, tokens: float) -> float:
    """Training FLOPs of ``tokens`` tokens: flops_per_token × tokens."""
    return flops_per_token(shape) * tokens


def depth_threshold(width: int) -> float:
    """Levine et al.'s depth threshold L_th = log3(dx)."""
    return math.log(width, 3)
