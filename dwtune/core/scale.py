"""Scale guards (pure): does the corpus hold enough tokens for the study, and do the budgets
bracket the transitions the reference law predicts?

Records keep the best validation loss over a run, so a trial that reads its training split
many times measures when its shape starts to overfit, not its capacity: a study whose trials
read more than ``data.max_epochs`` epochs is refused. The corpus size comes from the prepared
cache's manifest (exact) or, before preparation, from the corpus's size on disk (an estimate).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from dwtune.core.errors import InputError
from dwtune.core.projection import DepthWidthLaw, transition_size
from dwtune.core.spec import ExperimentSpec

# UTF-8 bytes per token of byte-level BPE against its vocabulary size, interpolated in ln V:
# 256 -> 1 (bytes only); 2,000 -> 2.76, measured with dwtune's BPE-2000 on the bundled plays
# (49.6 MB -> 17.96M tokens); 50,257 -> 4.0, GPT-2's tokenizer on English web text.
BPE_BYTES_PER_TOKEN = ((256, 1.0), (2000, 2.76), (50257, 4.0))
# .gz/.zst text is assumed to expand this much (typical of English text at default levels).
COMPRESSED_EXPANSION = 3.5


@dataclass(frozen=True)
class CorpusSize:
    """Training-split tokens of a corpus, and how they were obtained."""

    train_tokens: float | None  # None: the corpus is missing
    source: str  # "prepared manifest", "estimate from ...", or why it is missing
    exact: bool = False

    @property
    def missing(self) -> bool:
        return self.train_tokens is None


def bytes_per_token(tokenizer: str, vocab_size: int) -> float:
    """Estimated text bytes per token (char: one per byte, exact for ASCII text)."""
    if tokenizer != "bpe":
        return 1.0
    points = BPE_BYTES_PER_TOKEN
    x = math.log(min(max(vocab_size, points[0][0]), points[-1][0]))
    for (v0, b0), (v1, b1) in itertools.pairwise(points):
        if x <= math.log(v1):
            t = (x - math.log(v0)) / (math.log(v1) - math.log(v0))
            return b0 + t * (b1 - b0)
    return points[-1][1]


def estimate_corpus(spec: ExperimentSpec, text_bytes: float, compressed: bool) -> CorpusSize:
    """Training tokens estimated from the corpus's bytes on disk and its tokenizer."""
    data = spec.data
    text = text_bytes * (COMPRESSED_EXPANSION if compressed else 1.0)
    per_token = bytes_per_token(data.tokenizer, data.vocab_size)
    tokens = text / per_token * (1 - data.val_fraction)
    how = f"estimate from {text_bytes / 1e6:,.1f} MB on disk at {per_token:.2f} bytes/token"
    return CorpusSize(
        tokens, how + (f", x{COMPRESSED_EXPANSION} decompressed" if compressed else "")
    )


def tokens_per_trial(spec: ExperimentSpec) -> int:
    """Training tokens one trial reads: steps x batch x sequence length."""
    seq = spec.data.seq_len
    return spec.train.total_steps(seq) * spec.train.batch_size * seq


def epochs(spec: ExperimentSpec, corpus: CorpusSize) -> float | None:
    if corpus.train_tokens is None:  # corpus.missing, spelled so that the type narrows
        return None
    return tokens_per_trial(spec) / max(corpus.train_tokens, 1.0)


def epoch_problem(spec: ExperimentSpec, corpus: CorpusSize) -> str | None:
    """The one-line refusal when trials would read the training split too often, else None."""
    seen = epochs(spec, corpus)
    limit = spec.data.max_epochs
    if seen is None or seen <= limit:
        return None
    assert corpus.train_tokens is not None  # epochs() is None for a missing corpus
    need = tokens_per_trial(spec) / limit
    steps = max(
        1, math.floor(limit * corpus.train_tokens / (spec.train.batch_size * spec.data.seq_len))
    )
    return (
        f"data.corpus: each trial trains on {tokens_per_trial(spec):.3g} tokens "
        f"({spec.train.total_steps(spec.data.seq_len):,} steps x {spec.train.batch_size} x "
        f"{spec.data.seq_len}) = {seen:,.0f} epochs of the {corpus.train_tokens:.3g}-token "
        f"training split of {spec.data.corpus} ({corpus.source}), above data.max_epochs = "
        f"{limit:g}; use a corpus of at least {need:.3g} training tokens, or train.steps <= "
        f"{steps:,}, or raise data.max_epochs"
    )


def check_epochs(spec: ExperimentSpec, corpus: CorpusSize) -> None:
    problem = epoch_problem(spec, corpus)
    if problem:
        raise InputError(problem)


# --------------------------------------------------------------------------- coverage


def study_pairs(spec: ExperimentSpec) -> list[tuple[int, int]]:
    """The refine pairs, or consecutive depths of the grid when none are configured."""
    if spec.refine.pairs:
        return [(shallow, deep) for shallow, deep in spec.refine.pairs]
    depths = sorted(spec.space.depths)
    return list(itertools.pairwise(depths))


def coverage_warnings(spec: ExperimentSpec, law: DepthWidthLaw) -> list[str]:
    """Per pair, a line when the law's N* (paper convention) lies outside the budget range."""
    low, high = min(spec.space.budgets), max(spec.space.budgets)
    lines = []
    for shallow, deep in study_pairs(spec):
        n_star = transition_size(law, deep)
        if low < n_star < high:
            continue
        side, factor, edge = (
            ("below the smallest", low / n_star, low)
            if n_star <= low
            else ("above the largest", n_star / high, high)
        )
        lines.append(
            f"pair ({shallow}, {deep}): {law.name} puts N* = {n_star:.3g} {side} budget "
            f"{edge:.3g} (x{factor:.2f} outside); the grid cannot bracket it: extend "
            f"space.budgets past {n_star:.3g}"
        )
    return lines
