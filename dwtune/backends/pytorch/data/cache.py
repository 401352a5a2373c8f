"""The token cache: entry identity, the manifest, and the prepared corpus that trials map.

An entry is ``<cache_dir>/tokens/<key>/`` holding ``train.bin`` and ``val.bin`` (raw token ids,
uint16 where the vocabulary fits, else uint32), ``tokenizer.json`` and ``manifest.json``. The
key hashes the corpus content and every setting that changes the ids. An entry is built under
``<cache_dir>/building/<key>/`` and renamed into ``tokens/`` after its manifest is written, so
``tokens/`` only ever holds complete entries, and an entry without a manifest (or whose files
disagree with it) is never used.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dwtune.core.errors import InputError
from dwtune.core.spec import BUILTIN_CORPORA, DataConfig
from dwtune.storage.store import atomic_write_text

CACHE_VERSION = 2  # bump when reading, stripping, splitting or tokenizing changes
MANIFEST = "manifest.json"
TOKENIZER = "tokenizer.json"
SPLITS = ("train", "val")
HASH_BLOCK = 1 << 20


def _stat_signature(data: DataConfig, files: list[Path]) -> str:
    stats = [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    payload = {"files": stats, "column": data.text_column, "v": CACHE_VERSION}
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()


def content_hash(data: DataConfig, files: list[Path], cache_dir: Path) -> str:
    """SHA-256 of the corpus bytes, memoised by (path, size, mtime) so cache hits stay cheap."""
    memo = cache_dir / "fingerprints" / _stat_signature(data, files)
    if memo.exists():
        return memo.read_text().strip()
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda h=handle: h.read(HASH_BLOCK), b""):
                digest.update(block)
    atomic_write_text(memo, digest.hexdigest())
    return digest.hexdigest()


def cache_key(data: DataConfig, corpus_hash: str) -> str:
    """Corpus content + everything that changes the token arrays (not seq_len)."""
    bpe = data.tokenizer == "bpe"
    settings = {
        "v": CACHE_VERSION,
        "corpus": corpus_hash,
        "builtin": data.corpus if data.corpus in BUILTIN_CORPORA else "",
        "column": data.text_column,
        "tokenizer": data.tokenizer,
        # char ids do not depend on the number of embedding rows; BPE merges do
        "vocab_size": data.vocab_size if bpe else None,
        "bpe_sample_mb": data.bpe_sample_mb if bpe else None,
        "val_fraction": data.val_fraction,
    }
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:20]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(HASH_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class PreparedCorpus:
    """A tokenized corpus in the cache: two memory-mappable token files and their metadata."""

    directory: Path
    key: str
    corpus: str
    tokenizer: str
    vocab_size: int  # ids the tokenizer produces (char: distinct characters, bpe: vocab_size)
    train_tokens: int
    val_tokens: int
    cache_hit: bool
    dtype: str = "uint16"

    def _map(self, split: str, tokens: int) -> np.ndarray:
        return np.memmap(self.directory / f"{split}.bin", dtype=self.dtype, mode="r", shape=tokens)

    def train(self) -> np.ndarray:
        return self._map("train", self.train_tokens)

    def val(self) -> np.ndarray:
        return self._map("val", self.val_tokens)

    def check_fits(self, seq_len: int, embedding_rows: int) -> None:
        """Raise unless both splits hold a whole sequence and every id has an embedding row."""
        window = seq_len + 1  # inputs plus the shifted targets
        if min(self.train_tokens, self.val_tokens) < window:
            raise InputError(
                f"data.corpus: {self.corpus} has {self.train_tokens} training and "
                f"{self.val_tokens} held-out tokens; each split needs at least one sequence of "
                f"{window} tokens (seq_len + 1); use a larger corpus or a smaller data.seq_len"
            )
        if self.vocab_size > embedding_rows:
            raise InputError(
                f"vocab_size: got {embedding_rows}; the tokenizer produces "
                f"{self.vocab_size} ids; raise data.vocab_size"
            )


def write_manifest(directory: Path, meta: dict) -> None:
    """The last file of an entry: token counts, dtype and a SHA-256 per token file."""
    shards = {s: file_sha256(directory / f"{s}.bin") for s in SPLITS}
    atomic_write_text(directory / MANIFEST, json.dumps({**meta, "sha256": shards}, indent=1))


def read_manifest(entry: Path) -> dict | None:
    """The entry's manifest, or None unless it is complete and its files match its counts."""
    try:
        meta = json.loads((entry / MANIFEST).read_text())
        itemsize = np.dtype(meta["dtype"]).itemsize
        for split in SPLITS:
            if (entry / f"{split}.bin").stat().st_size != meta[f"{split}_tokens"] * itemsize:
                return None
        return meta if meta.get("cache_version") == CACHE_VERSION else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_entry(entry: Path, cache_hit: bool) -> PreparedCorpus | None:
    meta = read_manifest(entry)
    if meta is None:
        return None
    return PreparedCorpus(
        directory=entry,
        key=meta["key"],
        corpus=meta["corpus"],
        tokenizer=meta["tokenizer"],
        vocab_size=meta["vocab_size"],
        train_tokens=meta["train_tokens"],
        val_tokens=meta["val_tokens"],
        cache_hit=cache_hit,
        dtype=meta["dtype"],
    )


def entry_for(data: DataConfig, files: list[Path]) -> tuple[str, Path]:
    """(key, tokens/<key> folder) of ``data``'s corpus; hashes the corpus once per file stat."""
    cache_dir = Path(data.cache_dir)
    key = cache_key(data, content_hash(data, files, cache_dir))
    return key, cache_dir / "tokens" / key


def find_prepared(data: DataConfig, files: list[Path]) -> PreparedCorpus | None:
    """The prepared entry of ``data``'s corpus if one is complete, without reading the corpus
    (only its memoised fingerprint): cheap enough for ``dwtune plan``."""
    cache_dir = Path(data.cache_dir)
    memo = cache_dir / "fingerprints" / _stat_signature(data, files)
    if not memo.exists():
        return None
    key = cache_key(data, memo.read_text().strip())
    return load_entry(cache_dir / "tokens" / key, cache_hit=True)
