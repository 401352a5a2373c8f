"""Decoder-only Transformer built from a :class:`dwtune.core.budget.ModelShape` (nanoGPT-style).

Pre-LayerNorm blocks, learned positions, causal self-attention through
``scaled_dot_product_attention`` (fused QKV projection, one matmul), GELU MLP of width
``mlp_ratio·d``, tied input/output embeddings by default, no biases by default. The parameter
layout is exactly the one :func:`dwtune.core.budget.count_params` counts.

A :class:`dwtune.core.parametrization.Parametrization` (sp by default) sets the init of the
hidden matrices, the attention-logit scale, the residual-branch multiplier and the logits
multiplier (μP, CompleteP); it adds no parameter.

Shapes in comments: B batch, T sequence, D width, H heads, K head_dim = D / H, V vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from dwtune.core.budget import ModelShape
from dwtune.core.errors import InputError
from dwtune.core.parametrization import INIT_STD, Parametrization


def check_shape(shape: ModelShape) -> None:
    """Reject shapes no model can be built from, naming the fix."""
    if shape.width % shape.heads:
        raise InputError(
            f"width {shape.width} is not divisible by heads {shape.heads}; "
            f"use a width that is a multiple of {shape.heads}"
        )
    for name in ("depth", "width", "heads", "vocab_size", "seq_len"):
        if getattr(shape, name) < 1:
            raise InputError(f"{name}: got {getattr(shape, name)}; expected a value >= 1")


class CausalSelfAttention(nn.Module):
    def __init__(self, shape: ModelShape, scale: float | None = None):
        super().__init__()
        self.heads = shape.heads
        self.scale = scale  # attention-logit scale; None: SDPA's 1/sqrt(K)
        self.qkv = nn.Linear(shape.width, 3 * shape.width, bias=shape.bias)
        self.proj = nn.Linear(shape.width, shape.width, bias=shape.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        # split (backward: one cat) rather than indexing a stacked view (backward: zero-filled
        # full-size buffers per index); views, no copies before SDPA.
        q, k, v = (
            part.view(b, t, self.heads, d // self.heads).transpose(1, 2)  # (B, H, T, K)
            for part in self.qkv(x).split(d, dim=2)  # (B, T, 3D) -> 3 x (B, T, D)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))  # (B, T, D)


class MLP(nn.Module):
    def __init__(self, shape: ModelShape):
        super().__init__()
        self.fc = nn.Linear(shape.width, shape.mlp_hidden, bias=shape.bias)
        self.proj = nn.Linear(shape.mlp_hidden, shape.width, bias=shape.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    """The repeated unit: the one module that torch.compile compiles (regional compilation)."""

    def __init__(self, shape: ModelShape, param: Parametrization):
        super().__init__()
        self.norm1 = nn.LayerNorm(shape.width, bias=shape.bias)
        self.attn = CausalSelfAttention(shape, param.attention_scale())
        self.norm2 = nn.LayerNorm(shape.width, bias=shape.bias)
        self.mlp = MLP(shape)
        self.branch = param.branch_multiplier()  # 1 unless completep (1/m_L)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.branch == 1.0:
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))
        x = x + self.branch * self.attn(self.norm1(x))
        return x + self.branch * self.mlp(self.norm2(x))


class GPT(nn.Module):
    seed_axes = 0  # leading axes that index the seed (a FusedGPT has one)

    def __init__(self, shape: ModelShape, param: Parametrization | None = None):
        super().__init__()
        check_shape(shape)
        self.shape = shape
        self.param = param or Parametrization(width=shape.width, depth=shape.depth)
        self.output_multiplier = self.param.output_multiplier()  # 1/m under mup, completep
        self.token_embedding = nn.Embedding(shape.vocab_size, shape.width)
        self.position_embedding = nn.Embedding(shape.seq_len, shape.width)
        self.blocks = nn.ModuleList(Block(shape, self.param) for _ in range(shape.depth))
        self.final_norm = nn.LayerNorm(shape.width, bias=shape.bias)
        # Untied: a separate (V, D) output matrix; tied: the logits reuse the token embedding.
        self.head = (
            None if shape.tied_embeddings else nn.Linear(shape.width, shape.vocab_size, bias=False)
        )
        # Activation checkpointing per block: keep only each block's input for backward and
        # recompute the block there (about a third more FLOPs per step, far less memory).
        self.checkpoint_blocks = False
        self.apply(self._init_weights)
        self._init_hidden()

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def _init_hidden(self) -> None:
        # sp: std 0.02, and 0.02/sqrt(2L) on the two projections ending a residual branch
        # (GPT-2: the residual stream's variance independent of depth at init); mup and
        # completep scale the hidden matrices' std by 1/sqrt(m) (see core.parametrization).
        hidden, residual = self.param.hidden_init_std(), self.param.residual_projection_std()
        for block in self.blocks:
            nn.init.normal_(block.attn.qkv.weight, mean=0.0, std=hidden)
            nn.init.normal_(block.mlp.fc.weight, mean=0.0, std=hidden)
            nn.init.normal_(block.attn.proj.weight, mean=0.0, std=residual)
            nn.init.normal_(block.mlp.proj.weight, mean=0.0, std=residual)

    def hidden_matrices(self) -> list[nn.Parameter]:
        """The matrices whose both dimensions grow with width (μP's hidden weights)."""
        return [
            layer.weight
            for block in self.blocks
            for layer in (block.attn.qkv, block.attn.proj, block.mlp.fc, block.mlp.proj)
        ]

    @property
    def output_weight(self) -> torch.Tensor:
        return self.token_embedding.weight if self.head is None else self.head.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, V) for tokens (B, T)."""
        return F.linear(self.features(tokens), self.output_weight)  # (B, T, V)

    def features(self, tokens: torch.Tensor) -> torch.Tensor:
        """Final-norm hidden states (B, T, D), times the logits multiplier: the logits are
        ``features @ output_weight.T``."""
        t = tokens.shape[1]
        positions = self.position_embedding.weight[:t]  # (T, D), broadcast over B
        x = self.token_embedding(tokens) + positions  # (B, T, D)
        recompute = self.checkpoint_blocks and torch.is_grad_enabled()
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if recompute else block(x)
        hidden = self.final_norm(x)
        # μP's logits multiplier 1/m, applied to the features: (h/m)·Wᵀ = (h·Wᵀ)/m, so the
        # chunked loss and the logits agree
        return hidden if self.output_multiplier == 1.0 else hidden * self.output_multiplier

    def loss(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy (nats) of (B, T) tokens against (B, T) targets."""
        logits = self(tokens)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.reshape(-1))


def build_model(shape: ModelShape, param: Parametrization | None = None) -> GPT:
    """The model for ``shape``; its parameter count equals ``count_params(shape).total`` under
    every parametrisation."""
    return GPT(shape, param)


def compile_blocks(model: GPT) -> None:
    """Regional compilation: compile the repeated block, not the whole model.

    Every block has the same code and parameter shapes, so dynamo traces one graph and reuses
    it for all blocks (parameters are graph inputs): compile time stays flat as depth grows.
    """
    for block in model.blocks:
        block.compile()


# --------------------------------------------------------------------------- fused seeds
# k models of one shape trained as one: every parameter gains a leading seed axis S = k, each
# matmul becomes a batched matmul over S, and seed s's slice sees only seed s's tokens. No op
# mixes slices, so seed s's forward, loss and gradient are those of its model trained alone.


def _stacked(tensors: list[torch.Tensor]) -> nn.Parameter:
    return nn.Parameter(torch.stack([t.detach() for t in tensors]))


class FusedLinear(nn.Module):
    """k bias-optional linear maps: weight (S, out, in), bias (S, out)."""

    def __init__(self, layers: list[nn.Linear]):
        super().__init__()
        self.weight = _stacked([layer.weight for layer in layers])
        has_bias = layers[0].bias is not None
        self.bias = _stacked([layer.bias for layer in layers]) if has_bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seeds, *rows, width = x.shape
        flat = x.reshape(seeds, -1, width)  # (S, ..., in) -> (S, N, in)
        weight = self.weight.transpose(1, 2)  # (S, in, out)
        if self.bias is None:
            y = torch.bmm(flat, weight)
        else:
            y = torch.baddbmm(self.bias.unsqueeze(1), flat, weight)
        return y.view(seeds, *rows, -1)  # (S, N, out) -> (S, ..., out)


class FusedLayerNorm(nn.Module):
    """k LayerNorms over the last axis: weight, bias (S, D); eps as nn.LayerNorm's."""

    def __init__(self, norms: list[nn.LayerNorm]):
        super().__init__()
        self.eps = norms[0].eps
        self.weight = _stacked([norm.weight for norm in norms])
        has_bias = norms[0].bias is not None
        self.bias = _stacked([norm.bias for norm in norms]) if has_bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        width = x.shape[-1]
        per_seed = (x.shape[0],) + (1,) * (x.dim() - 2) + (width,)  # (S, 1, ..., D)
        y = F.layer_norm(x, (width,), eps=self.eps) * self.weight.view(per_seed)
        return y if self.bias is None else y + self.bias.view(per_seed)


class FusedAttention(nn.Module):
    def __init__(self, layers: list[CausalSelfAttention]):
        super().__init__()
        self.heads, self.scale = layers[0].heads, layers[0].scale
        self.qkv = FusedLinear([layer.qkv for layer in layers])
        self.proj = FusedLinear([layer.proj for layer in layers])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, b, t, d = x.shape
        # the seed axis folds into the batch axis: SDPA treats each (seed, row) on its own
        q, k, v = (
            part.reshape(s * b, t, self.heads, d // self.heads).transpose(1, 2)  # (SB, H, T, K)
            for part in self.qkv(x).split(d, dim=3)  # (S, B, T, 3D) -> 3 x (S, B, T, D)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        return self.proj(y.transpose(1, 2).reshape(s, b, t, d))  # (S, B, T, D)


class FusedMLP(nn.Module):
    def __init__(self, layers: list[MLP]):
        super().__init__()
        self.fc = FusedLinear([layer.fc for layer in layers])
        self.proj = FusedLinear([layer.proj for layer in layers])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class FusedBlock(nn.Module):
    """k copies of one layer's :class:`Block` (the unit regional compilation compiles)."""

    def __init__(self, blocks: list[Block]):
        super().__init__()
        self.norm1 = FusedLayerNorm([block.norm1 for block in blocks])
        self.attn = FusedAttention([block.attn for block in blocks])
        self.norm2 = FusedLayerNorm([block.norm2 for block in blocks])
        self.mlp = FusedMLP([block.mlp for block in blocks])
        self.branch = blocks[0].branch

    forward = Block.forward


class FusedGPT(nn.Module):
    """k :class:`GPT` of one shape as one module; every parameter is (S, *its shape alone).

    Built from the k models themselves (each initialised as it would be alone), so seed s's
    slice starts exactly where its own training would. Tokens are (S, B, T): seed s's rows.
    """

    seed_axes = 1  # leading axes that index the seed (make_optimizer's matrix test)

    def __init__(self, models: list[GPT]):
        super().__init__()
        first = models[0]
        self.shape, self.param, self.seeds = first.shape, first.param, len(models)
        self.output_multiplier = first.output_multiplier
        self.token_embedding = _stacked([m.token_embedding.weight for m in models])  # (S, V, D)
        self.position_embedding = _stacked([m.position_embedding.weight for m in models])
        self.blocks = nn.ModuleList(
            FusedBlock([m.blocks[i] for m in models]) for i in range(first.shape.depth)
        )
        self.final_norm = FusedLayerNorm([m.final_norm for m in models])
        self.head = None if first.head is None else _stacked([m.head.weight for m in models])
        self.checkpoint_blocks = False

    def hidden_matrices(self) -> list[nn.Parameter]:
        """μP's hidden weights, stacked over seeds (as :meth:`GPT.hidden_matrices`)."""
        return [
            layer.weight
            for block in self.blocks
            for layer in (block.attn.qkv, block.attn.proj, block.mlp.fc, block.mlp.proj)
        ]

    @property
    def output_weight(self) -> torch.Tensor:
        """(S, V, D): each seed's logits matrix."""
        return self.token_embedding if self.head is None else self.head

    def features(self, tokens: torch.Tensor) -> torch.Tensor:
        """(S, B, T, D) final-norm hidden states (× the logits multiplier) of (S, B, T) tokens."""
        seeds, _, t = tokens.shape
        vocab, width = self.token_embedding.shape[1:]
        # seed s's ids offset into its own rows of the (S·V, D) table: one embedding lookup
        offsets = torch.arange(seeds, device=tokens.device).view(seeds, 1, 1) * vocab
        table = self.token_embedding.view(seeds * vocab, width)
        x = F.embedding(tokens + offsets, table)  # (S, B, T, D)
        x = x + self.position_embedding[:, :t].unsqueeze(1)  # (S, 1, T, D) over B
        recompute = self.checkpoint_blocks and torch.is_grad_enabled()
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if recompute else block(x)
        hidden = self.final_norm(x)
        return hidden if self.output_multiplier == 1.0 else hidden * self.output_multiplier

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(S, N, V) logits of (S, N, D) hidden rows, each seed through its own matrix."""
        return torch.bmm(hidden, self.output_weight.transpose(1, 2))

    def seed_losses(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """(S,) mean next-token cross-entropy (nats) of each seed's (B, T) rows."""
        seeds, vocab = self.seeds, self.shape.vocab_size
        hidden = self.features(tokens).reshape(seeds, -1, self.shape.width)  # (S, B·T, D)
        logits = self.logits(hidden).reshape(-1, vocab).float()  # (S·B·T, V)
        per_token = F.cross_entropy(logits, targets.reshape(-1), reduction="none")
        return per_token.view(seeds, -1).mean(dim=1)  # (S·B·T,) -> (S, B·T) -> (S,)


def build_fused_model(
    shape: ModelShape, seeds: list[int], param: Parametrization | None = None
) -> FusedGPT:
    """One :class:`FusedGPT` of ``len(seeds)`` models, model s initialised from
    ``torch.manual_seed(seeds[s])`` exactly as :func:`build_model` after that seed."""
    models = []
    for seed in seeds:
        torch.manual_seed(seed)
        models.append(build_model(shape, param))
    return FusedGPT(models)
