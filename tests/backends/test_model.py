"""The model: exact parameter counts, causality, depth-scaled init, regional compilation."""

from __future__ import annotations

import itertools

import pytest
import torch

from dwtune.backends.pytorch.model import build_model, compile_blocks
from dwtune.core.budget import ModelShape, count_params
from dwtune.core.errors import InputError
from dwtune.core.parametrization import Parametrization, parametrization_for

SHAPE_GRID = [
    ModelShape(
        depth=depth,
        width=width,
        heads=heads,
        vocab_size=vocab,
        seq_len=seq,
        mlp_ratio=ratio,
        tied_embeddings=tied,
        bias=bias,
    )
    for depth, (width, heads), vocab, seq, ratio, tied, bias in itertools.product(
        (1, 3),
        ((8, 1), (24, 2), (24, 3), (32, 4)),
        (17,),
        (5,),
        (4.0, 2.5, 1.3),
        (True, False),
        (False, True),
    )
]


@pytest.mark.parametrize("shape", SHAPE_GRID, ids=str)
def test_parameter_count_equals_the_budget_count(shape):
    model = build_model(shape)
    assert sum(p.numel() for p in model.parameters()) == count_params(shape).total


def _rules(name: str, shape: ModelShape) -> Parametrization:
    return parametrization_for(
        name,
        width=shape.width,
        depth=shape.depth,
        heads=shape.heads,
        base_width=8,
        base_depth=1,
        head_dim_fixed=False,
    )


@pytest.mark.parametrize("name", ["sp", "mup", "completep"])
@pytest.mark.parametrize("shape", SHAPE_GRID[::7], ids=str)
def test_parameter_count_is_the_same_under_every_parametrization(name, shape):
    model = build_model(shape, _rules(name, shape))
    assert sum(p.numel() for p in model.parameters()) == count_params(shape).total


def test_mup_scales_hidden_init_and_logits_with_width_and_completep_the_branches():
    shape = ModelShape(depth=4, width=32, heads=2, vocab_size=17, seq_len=5)
    torch.manual_seed(0)
    sp = build_model(shape)
    mup = build_model(shape, _rules("mup", shape))  # width multiplier m = 32 / 8 = 4
    completep = build_model(shape, _rules("completep", shape))  # depth multiplier 4
    ratio = float(
        mup.blocks[0].mlp.fc.weight.detach().std() / sp.blocks[0].mlp.fc.weight.detach().std()
    )
    assert ratio == pytest.approx(0.5, rel=0.1)  # 1/sqrt(m)
    assert mup.output_multiplier == pytest.approx(0.25)
    assert mup.blocks[0].attn.scale == pytest.approx(2.0 / 16)  # sqrt(K_base = 4) / K
    assert sp.blocks[0].attn.scale is None and sp.blocks[0].branch == 1.0
    assert completep.blocks[0].branch == pytest.approx(0.25)


def test_parameter_count_matches_each_part():
    shape = ModelShape(
        depth=2, width=16, heads=2, vocab_size=40, seq_len=8, bias=True, tied_embeddings=False
    )
    model, expected = build_model(shape), count_params(shape)
    blocks = sum(p.numel() for p in model.blocks.parameters())
    assert blocks == expected.blocks
    assert model.head.weight.numel() == expected.head
    assert model.position_embedding.weight.numel() == expected.position_embedding


def test_tied_model_shares_the_output_matrix():
    model = build_model(ModelShape(depth=1, width=8, heads=2, vocab_size=11, seq_len=4))
    assert model.output_weight is model.token_embedding.weight
    assert model.head is None


@pytest.mark.parametrize("width,heads", [(10, 3), (64, 5)])
def test_width_not_divisible_by_heads_is_an_input_error(width, heads):
    with pytest.raises(InputError, match=f"width {width} is not divisible by heads {heads}"):
        build_model(ModelShape(depth=1, width=width, heads=heads, vocab_size=10, seq_len=4))


def test_logits_do_not_depend_on_future_tokens():
    torch.manual_seed(0)
    model = build_model(ModelShape(depth=2, width=16, heads=2, vocab_size=20, seq_len=12))
    tokens = torch.randint(0, 20, (2, 12))
    changed = tokens.clone()
    changed[:, 7:] = (changed[:, 7:] + 1) % 20
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    assert before.shape == (2, 12, 20)
    torch.testing.assert_close(before[:, :7], after[:, :7])
    assert not torch.allclose(before[:, 7:], after[:, 7:])


def test_residual_projections_shrink_with_depth():
    def proj_std(depth: int) -> float:
        torch.manual_seed(0)
        model = build_model(ModelShape(depth=depth, width=64, heads=2, vocab_size=10, seq_len=4))
        return torch.cat([b.mlp.proj.weight.flatten() for b in model.blocks]).std().item()

    # std = 0.02 / sqrt(2L): depth 8 is half of depth 2
    assert proj_std(8) == pytest.approx(proj_std(2) / 2, rel=0.05)


def test_same_seed_same_initialisation():
    shape = ModelShape(depth=1, width=8, heads=2, vocab_size=10, seq_len=4)
    torch.manual_seed(3)
    first = build_model(shape).state_dict()
    torch.manual_seed(3)
    second = build_model(shape).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)


@pytest.mark.slow
def test_regional_compilation_traces_one_graph_for_all_blocks(tmp_path, monkeypatch):
    """Compile time stays flat in depth: one block graph, reused by every block."""
    from torch._dynamo.utils import counters

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    counters.clear()
    model = build_model(ModelShape(depth=3, width=16, heads=2, vocab_size=30, seq_len=8))
    compile_blocks(model)
    tokens = torch.randint(0, 30, (2, 9))
    model.loss(tokens[:, :-1], tokens[:, 1:]).backward()
    assert counters["stats"]["unique_graphs"] == 1
    assert all(p.grad is not None for p in model.parameters())
    torch._dynamo.reset()
