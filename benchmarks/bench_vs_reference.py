"""dwtune's training step against a plain textbook reference, in one process, alternating.

The reference is what a tutorial writes: eager PyTorch, separate query/key/value projections,
explicit masked-softmax attention, ``nn.GELU`` MLP, ``torch.optim.AdamW`` with its defaults,
no clipping, no schedule (so it does less work per step than dwtune's step, which also clips
gradients and sets the learning rate). Both train the same shape (same parameter count,
checked) on the same random batches; rounds alternate which one runs first, so slow phases of a
shared machine hit both. Prints tokens/s of each (median over rounds) and the ratio.

    python benchmarks/bench_vs_reference.py                     # 4x128 and 16x64
    python benchmarks/bench_vs_reference.py --shapes 4x128 --rounds 9 --profile
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from dwtune.backends.pytorch.perf import synchronize
from dwtune.backends.pytorch.train import build_training, configure_runtime
from dwtune.core.budget import ModelShape
from dwtune.core.spec import DataConfig, TrainConfig

DEFAULT_SHAPES = "4x128,16x64"
RANDOM_BATCHES = 4


# --------------------------------------------------------------------------- the reference


class ReferenceAttention(nn.Module):
    def __init__(self, width: int, heads: int, seq_len: int):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(width, width, bias=False)
        self.key = nn.Linear(width, width, bias=False)
        self.value = nn.Linear(width, width, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        self.register_buffer("mask", torch.tril(torch.ones(seq_len, seq_len)).bool())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        k = self.key(x).view(b, t, self.heads, d // self.heads).transpose(1, 2)
        q = self.query(x).view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = self.value(x).view(b, t, self.heads, d // self.heads).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        scores = scores.masked_fill(~self.mask[:t, :t], float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.out(y.transpose(1, 2).contiguous().view(b, t, d))


class ReferenceBlock(nn.Module):
    def __init__(self, width: int, heads: int, seq_len: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(width, bias=False)
        self.attn = ReferenceAttention(width, heads, seq_len)
        self.ln2 = nn.LayerNorm(width, bias=False)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width, bias=False),
            nn.GELU(),
            nn.Linear(4 * width, width, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class ReferenceGPT(nn.Module):
    def __init__(self, shape: ModelShape):
        super().__init__()
        self.tok = nn.Embedding(shape.vocab_size, shape.width)
        self.pos = nn.Embedding(shape.seq_len, shape.width)
        self.blocks = nn.ModuleList(
            ReferenceBlock(shape.width, shape.heads, shape.seq_len) for _ in range(shape.depth)
        )
        self.ln_f = nn.LayerNorm(shape.width, bias=False)
        self.lm_head = nn.Linear(shape.width, shape.vocab_size, bias=False)
        self.lm_head.weight = self.tok.weight  # tied, like dwtune's default

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def reference_step(shape: ModelShape, device: torch.device):
    model = ReferenceGPT(shape).to(device)
    optimizer = torch.optim.AdamW(model.parameters())

    def step(inputs: torch.Tensor, targets: torch.Tensor) -> None:
        optimizer.zero_grad()
        model(inputs, targets).backward()
        optimizer.step()

    return model, step


# --------------------------------------------------------------------------- timing


def parse_shapes(text: str) -> list[tuple[int, int]]:
    try:
        return [tuple(int(v) for v in item.split("x")) for item in text.split(",")]
    except ValueError:
        raise SystemExit(f"--shapes: got {text!r}; expected DEPTHxWIDTH,... e.g. 4x128") from None


def tokens_per_s(step, batches: list[torch.Tensor], steps: int, device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    for i in range(steps):
        tokens = batches[i % len(batches)]
        step(tokens[:, :-1], tokens[:, 1:])
    synchronize(device)
    return steps * batches[0][:, 1:].numel() / (time.perf_counter() - start)


def profile_top(step, batches, steps: int, rows: int = 12) -> str:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(steps):
            tokens = batches[i % len(batches)]
            step(tokens[:, :-1], tokens[:, 1:])
    return prof.key_averages().table(
        sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=48
    )


def compare(shape: ModelShape, args: argparse.Namespace) -> dict:
    runtime = configure_runtime(args.device, False, DataConfig().cache_dir)
    cfg = TrainConfig(steps=1, batch_size=args.batch_size)
    ours = build_training(shape, cfg, runtime, seed=0)
    reference, theirs = reference_step(shape, runtime.device)
    ours_params = sum(p.numel() for p in ours.model.parameters())
    assert ours_params == sum(p.numel() for p in reference.parameters()), "shapes differ"
    generator = torch.Generator().manual_seed(0)
    batches = [
        torch.randint(
            0, shape.vocab_size, (args.batch_size, shape.seq_len + 1), generator=generator
        ).to(runtime.device)
        for _ in range(RANDOM_BATCHES)
    ]
    contenders = {"dwtune": ours, "reference": theirs}
    for step in contenders.values():
        tokens_per_s(step, batches, args.warmup, runtime.device)
    rounds: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(args.rounds):
        order = list(contenders) if r % 2 == 0 else list(reversed(contenders))
        for name in order:
            rounds[name].append(tokens_per_s(contenders[name], batches, args.steps, runtime.device))
    result = summarise(shape, args, runtime, ours_params, rounds)
    if args.profile:
        result["profiles"] = {
            name: profile_top(step, batches, args.steps) for name, step in contenders.items()
        }
    return result


def summarise(shape, args, runtime, params: int, rounds: dict[str, list[float]]) -> dict:
    ours, theirs = (statistics.median(rounds[n]) for n in ("dwtune", "reference"))
    per_round = [a / b for a, b in zip(rounds["dwtune"], rounds["reference"], strict=True)]
    return {
        "depth": shape.depth,
        "width": shape.width,
        "heads": shape.heads,
        "seq_len": shape.seq_len,
        "batch_size": args.batch_size,
        "vocab_size": shape.vocab_size,
        "params": params,
        "device": runtime.device.type,
        "threads": runtime.threads,
        "rounds": args.rounds,
        "steps_per_round": args.steps,
        "dwtune_tokens_per_s": ours,
        "reference_tokens_per_s": theirs,
        "ratio": ours / theirs,
        "round_ratios": per_round,
    }


def format_result(r: dict) -> str:
    ratios = r["round_ratios"]
    lines = [
        f"depth {r['depth']} x width {r['width']} ({r['heads']} heads, seq {r['seq_len']}, "
        f"batch {r['batch_size']}, vocab {r['vocab_size']}, {r['params']:,} params) on "
        f"{r['device']} with {r['threads']} threads: {r['rounds']} alternating rounds x "
        f"{r['steps_per_round']} steps",
        f"  dwtune     {r['dwtune_tokens_per_s']:>10,.0f} tokens/s (median of rounds)",
        f"  reference  {r['reference_tokens_per_s']:>10,.0f} tokens/s (median of rounds)",
        f"  ratio      {r['ratio']:.2f}x dwtune / reference (per round: median "
        f"{statistics.median(ratios):.2f}x, range {min(ratios):.2f}x-{max(ratios):.2f}x)",
    ]
    for name, table in r.get("profiles", {}).items():
        lines += [f"  profile of {name} ({r['steps_per_round']} steps):", table]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="DEPTHxWIDTH list")
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--vocab-size", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--profile", action="store_true", help="print top ops of each step")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    for depth, width in parse_shapes(args.shapes):
        shape = ModelShape(
            depth=depth,
            width=width,
            heads=args.heads,
            vocab_size=args.vocab_size,
            seq_len=args.seq_len,
        )
        result = compare(shape, args)
        print(json.dumps(result) if args.json else format_result(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
