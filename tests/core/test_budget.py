"""Budget math: exact counts against a reference model, width solving, FLOPs."""

import itertools
import math

import pytest
from torch import nn

from dwtune.core.budget import (
    ModelShape,
    count_params,
    depth_threshold,
    flops_per_token,
    paper_size,
    solve_width,
    width_step,
)
from dwtune.core.errors import InputError


class ReferenceBlock(nn.Module):
    """A textbook pre-LN GPT block, written independently of dwtune.backends.pytorch.model."""

    def __init__(self, d: int, hidden: int, bias: bool):
        super().__init__()
        self.ln1 = nn.LayerNorm(d, bias=bias)
        self.q = nn.Linear(d, d, bias=bias)
        self.k = nn.Linear(d, d, bias=bias)
        self.v = nn.Linear(d, d, bias=bias)
        self.out = nn.Linear(d, d, bias=bias)
        self.ln2 = nn.LayerNorm(d, bias=bias)
        self.up = nn.Linear(d, hidden, bias=bias)
        self.down = nn.Linear(hidden, d, bias=bias)


def reference_model(shape: ModelShape) -> nn.Module:
    model = nn.Module()
    model.tok = nn.Embedding(shape.vocab_size, shape.width)
    model.pos = nn.Embedding(shape.seq_len, shape.width)
    model.blocks = nn.ModuleList(
        ReferenceBlock(shape.width, shape.mlp_hidden, shape.bias) for _ in range(shape.depth)
    )
    model.ln_f = nn.LayerNorm(shape.width, bias=shape.bias)
    if not shape.tied_embeddings:
        model.head = nn.Linear(shape.width, shape.vocab_size, bias=False)
    return model


SHAPES = [
    ModelShape(
        depth=d,
        width=w,
        heads=2,
        vocab_size=v,
        seq_len=t,
        mlp_ratio=r,
        tied_embeddings=tied,
        bias=bias,
    )
    for d, w, v, t, r, tied, bias in itertools.product(
        (1, 3), (16, 48), (97, 2000), (32, 128), (4.0, 2.5), (True, False), (False, True)
    )
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_count_params_matches_reference_model(shape):
    expected = sum(p.numel() for p in reference_model(shape).parameters())
    assert count_params(shape).total == expected


def test_non_embedding_equals_paper_convention_without_norms():
    shape = ModelShape(depth=6, width=256, heads=2, vocab_size=2000, seq_len=128)
    counts = count_params(shape)
    layer_norm_weights = (2 * shape.depth + 1) * shape.width
    assert counts.non_embedding - layer_norm_weights == paper_size(6, 256) == 12 * 6 * 256**2


@pytest.mark.parametrize("convention", ["non_embedding", "total"])
def test_width_solving_is_monotone_in_depth_and_budget(convention):
    template = ModelShape(depth=1, width=2, heads=2, vocab_size=256, seq_len=64)
    budgets = [1e5, 3e5, 1e6, 3e6, 1e7]
    depths = [1, 2, 4, 8, 16]
    widths = {
        (d, n): solve_width(template, d, n, 8, convention).shape.width
        for d in depths
        for n in budgets
    }
    for d in depths:
        assert [widths[d, n] for n in budgets] == sorted(widths[d, n] for n in budgets)
    for n in budgets:
        assert [widths[d, n] for d in depths] == sorted(
            (widths[d, n] for d in depths), reverse=True
        )


def test_solved_width_is_the_closest_legal_width():
    template = ModelShape(depth=1, width=2, heads=2, vocab_size=256, seq_len=64)
    cell = solve_width(template, 6, 1e7, 8, "non_embedding")
    assert cell.shape.width % width_step(2, 8) == 0
    for neighbour in (cell.shape.width - 8, cell.shape.width + 8):
        assert abs(paper_size(6, neighbour) - 1e7) >= abs(cell.size - 1e7)
    assert cell.budget_error == pytest.approx((cell.size - 1e7) / 1e7)


def test_width_step_honours_heads_and_alignment():
    assert width_step(3, 8) == 24
    template = ModelShape(depth=1, width=3, heads=3, vocab_size=256, seq_len=64)
    assert solve_width(template, 2, 5e5, 8, "non_embedding").shape.width % 24 == 0


def test_budget_too_small_for_depth_is_an_input_error():
    template = ModelShape(depth=1, width=2, heads=2, vocab_size=256, seq_len=64)
    with pytest.raises(InputError, match="too small for depth 48"):
        solve_width(template, 48, 1e4, 64, "non_embedding")


def test_flops_per_token_is_six_n_plus_attention():
    shape = ModelShape(depth=4, width=128, heads=2, vocab_size=2000, seq_len=128)
    matmul = count_params(shape).non_embedding + 2000 * 128
    assert flops_per_token(shape) == 6 * matmul + 12 * 4 * 128 * 128


def test_depth_threshold_is_log3_width():
    assert depth_threshold(3**5) == pytest.approx(5.0)
    assert math.isclose(depth_threshold(1024), math.log(1024) / math.log(3))
