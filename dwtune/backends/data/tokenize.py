"""Tokenizers: per-character ids, or byte-level BPE trained on a bounded sample of the training
split; and the encoder that turns one chunk of text into token ids (in a worker process or in
the calling one). A tokenizer is saved as ``tokenizer.json`` and every encoder loads it from
there, so the ids never depend on which process encoded a chunk."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from dwtune.core.errors import InputError
from dwtune.core.spec import DataConfig
from dwtune.storage.store import atomic_write_text

BYTE_ALPHABET = 256  # byte-level BPE starts from every byte value
LINES_PER_BATCH = 4096  # lines per string handed to the BPE trainer and encoder


def token_dtype(vocab_size: int) -> type:
    """uint16 where every id fits (vocabularies up to 65,536), else uint32."""
    return np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32


def line_batches(text: str, per_batch: int = LINES_PER_BATCH) -> list[str]:
    """Text in strings of whole lines (newlines kept) for the BPE trainer and encoder."""
    lines = text.splitlines(keepends=True)
    return ["".join(lines[i : i + per_batch]) for i in range(0, len(lines), per_batch)]


# --------------------------------------------------------------------------- training


def char_vocabulary(data: DataConfig, chars: set[str]) -> dict:
    """The char tokenizer: one id per distinct character, ids sorted by code point."""
    if len(chars) > data.vocab_size:
        raise InputError(
            f"data.vocab_size: got {data.vocab_size}; the corpus {data.corpus} has "
            f"{len(chars)} distinct characters; raise data.vocab_size to at least "
            f"{len(chars)} or use tokenizer: bpe"
        )
    return {"type": "char", "chars": "".join(sorted(chars))}


def train_bpe(data: DataConfig, sample: Iterable[str], path: Path) -> int:
    """Train byte-level BPE with ``vocab_size`` tokens on ``sample``; save it to ``path``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if data.vocab_size <= BYTE_ALPHABET:
        raise InputError(
            f"data.vocab_size: got {data.vocab_size}; byte-level BPE needs more "
            f"than {BYTE_ALPHABET} (256 bytes + merges); use tokenizer: char"
        )
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=data.vocab_size,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    batches = (batch for text in sample for batch in line_batches(text))
    tokenizer.train_from_iterator(batches, trainer=trainer)
    if tokenizer.get_vocab_size() < data.vocab_size:
        raise InputError(
            f"data.vocab_size: got {data.vocab_size}; the training split of "
            f"{data.corpus} supports only {tokenizer.get_vocab_size()} BPE tokens; "
            f"lower data.vocab_size or use a larger corpus"
        )
    atomic_write_text(path, tokenizer.to_str())
    return tokenizer.get_vocab_size()


def save_char_vocabulary(vocabulary: dict, path: Path) -> int:
    atomic_write_text(path, json.dumps(vocabulary))
    return len(vocabulary["chars"])


# --------------------------------------------------------------------------- encoding


class Encoder:
    """Text -> ids of the saved tokenizer at ``path`` (char or BPE), as ``dtype``."""

    def __init__(self, path: Path, dtype: type):
        self.dtype = dtype
        saved = json.loads(Path(path).read_text())
        if saved.get("type") == "char":
            self.alphabet = np.array([ord(c) for c in saved["chars"]], dtype=np.uint32)
            self.bpe = None
        else:
            from tokenizers import Tokenizer

            self.bpe = Tokenizer.from_file(str(path))

    def __call__(self, text: str) -> np.ndarray:
        if not text:
            return np.zeros(0, dtype=self.dtype)
        if self.bpe is None:
            codepoints = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
            return np.searchsorted(self.alphabet, codepoints).astype(self.dtype)
        encode = getattr(self.bpe, "encode_batch_fast", self.bpe.encode_batch)
        encodings = encode(line_batches(text))
        return np.concatenate([np.asarray(e.ids, dtype=self.dtype) for e in encodings])


_WORKER_ENCODER: Encoder | None = None


def init_worker(path: str, dtype: type) -> None:
    """Pool initializer: one encoder per worker; BPE single-threaded (the pool is parallel)."""
    global _WORKER_ENCODER
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _WORKER_ENCODER = Encoder(Path(path), dtype)


def encode_in_worker(parts: tuple[str, ...]) -> tuple[np.ndarray, ...]:
    """Encode each part of one chunk (a chunk holding the split point has two)."""
    assert _WORKER_ENCODER is not None, "init_worker did not run"
    return tuple(_WORKER_ENCODER(part) for part in parts)
