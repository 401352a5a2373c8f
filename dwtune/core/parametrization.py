"""Width and depth parametrisations (pure): the multipliers a model and its optimizer apply.

Three choices (``model.parametrization``), all reducing to the same network at the base shape:

- ``sp``: standard parametrisation, today's model: GPT-2 init std 0.02 at every width (residual
  projections 0.02/√(2L)), one Adam rate for every parameter, attention logits q·k/√K.
- ``mup``: μP for Adam (Yang et al. 2022, Tensor Programs V, table 3; the ``mup`` package's
  MuAdam/MuReadout rules), with width multiplier ``m = width / base_width``:
  hidden matrices (qkv, attention and MLP projections: both dimensions grow with width) get
  init std ``0.02/√m`` and Adam rate ``lr/m``; embeddings, LayerNorm gains and biases keep
  std and rate (vector-like); the output logits are multiplied by ``1/m`` (the tied embedding
  is the readout); attention logits are q·k·√K_base/K, i.e. 1/K scaling that equals the
  standard 1/√K at the base width.
- ``completep``: μP plus depth-wise transfer with α = 1 (Dey et al. 2025, "Don't be lazy:
  CompleteP enables compute-efficient deep transformers", table 1), with depth multiplier
  ``m_L = L / base_depth``: each residual branch's output is multiplied by ``1/m_L``; the
  hidden matrices' rate stays ``lr/m`` (the depth factor m_L^(α−1) is 1 at α = 1) and their
  init ``0.02/√m`` (no GPT-2 1/√(2L) on the projections: the branch multiplier takes depth
  over); Adam's ε of hidden matrices scales by ``1/(m·m_L)`` and of the vector-like
  parameters by ``1/m_L``; the hidden matrices' weight decay is multiplied by ``m`` so that
  the decay per step, lr × wd, is width-independent (AdamW multiplies them).

Parameter counts do not change: every rule is a multiplier, not a parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dwtune.core import vocabulary

if TYPE_CHECKING:
    from dwtune.core.budget import ModelShape
    from dwtune.core.spec import ModelConfig

INIT_STD = 0.02  # GPT-2 initialisation at the base width


@dataclass(frozen=True)
class Parametrization:
    name: str = vocabulary.Parametrization.SP.value
    width: int = 1
    depth: int = 1
    head_dim: int = 1
    base_width: int | None = None
    base_depth: int | None = None
    base_head_dim: float | None = None  # head width at the base width (the base shape's K)

    @property
    def width_mult(self) -> float:
        """m = width / base_width (1 under sp)."""
        if self.name == vocabulary.Parametrization.SP:
            return 1.0
        assert self.base_width is not None  # ModelConfig requires it for mup and completep
        return self.width / self.base_width

    @property
    def depth_mult(self) -> float:
        """m_L = depth / base_depth (1 unless completep)."""
        if self.name != vocabulary.Parametrization.COMPLETEP:
            return 1.0
        assert self.base_depth is not None  # ModelConfig requires it for completep
        return self.depth / self.base_depth

    def hidden_init_std(self) -> float:
        return INIT_STD / math.sqrt(self.width_mult)

    def residual_projection_std(self) -> float:
        """Init std of the two matrices that end a residual branch."""
        if self.name == vocabulary.Parametrization.COMPLETEP:
            return self.hidden_init_std()
        return self.hidden_init_std() / math.sqrt(2 * self.depth)

    def hidden_lr_scale(self) -> float:
        return 1.0 / self.width_mult

    def hidden_weight_decay_scale(self) -> float:
        return self.width_mult if self.name == vocabulary.Parametrization.COMPLETEP else 1.0

    def hidden_eps_scale(self) -> float:
        return (
            1.0 / (self.width_mult * self.depth_mult)
            if self.name == vocabulary.Parametrization.COMPLETEP
            else 1.0
        )

    def vector_eps_scale(self) -> float:
        return 1.0 / self.depth_mult

    def output_multiplier(self) -> float:
        """Logits multiplier: 1/m under mup and completep."""
        return 1.0 / self.width_mult

    def branch_multiplier(self) -> float:
        """Residual branch multiplier: 1/m_L under completep."""
        return 1.0 / self.depth_mult

    def attention_scale(self) -> float | None:
        """Attention-logit scale: None (SDPA's 1/√K) under sp; √K_base/K otherwise."""
        if self.name == vocabulary.Parametrization.SP:
            return None
        assert self.base_head_dim is not None  # parametrization_for always sets it
        return math.sqrt(self.base_head_dim) / self.head_dim


def parametrization_for(
    name: str,
    *,
    width: int,
    depth: int,
    heads: int,
    base_width: int | None,
    base_depth: int | None,
    head_dim_fixed: bool,
) -> Parametrization:
    """The rules for one shape. With a fixed head count the base shape's head width is
    base_width/heads; with a fixed head_dim it is the model's own head width."""
    head_dim = width // heads
    base_head_dim = head_dim if head_dim_fixed or base_width is None else base_width / heads
    return Parametrization(
        name=name,
        width=width,
        depth=depth,
        head_dim=head_dim,
        base_width=base_width,
        base_depth=base_depth,
        base_head_dim=base_head_dim,
    )


def for_shape(model: ModelConfig, shape: ModelShape) -> Parametrization:
    """The rules of ``model`` (a ModelConfig: parametrization, base_width, base_depth,
    head_dim) for one ModelShape."""
    return parametrization_for(
        model.parametrization,
        width=shape.width,
        depth=shape.depth,
        heads=shape.heads,
        base_width=model.base_width,
        base_depth=model.base_depth,
        head_dim_fixed=model.head_dim is not None,
    )
