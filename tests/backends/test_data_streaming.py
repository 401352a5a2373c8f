"""Streaming preparation: formats, chunks, worker pool, resumption after a kill, the manifest."""

from __future__ import annotations

import gzip
import hashlib
import json
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from dwtune.backends.data import cache, prepare, sources
from dwtune.backends.data.prepare import prepare_corpus
from dwtune.backends.data.sources import iter_chunks, stripped
from dwtune.backends.data.tokenize import token_dtype
from dwtune.core.errors import InputError
from dwtune.core.spec import DataConfig

SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "an", "er", "is", "ul"]


def lines(count: int, seed: int) -> list[str]:
    """Lines of pseudo-words: enough distinct words for a few hundred BPE merges."""
    rng = random.Random(seed)
    words = ["".join(rng.choices(SYLLABLES, k=rng.randint(1, 4))) for _ in range(400)]
    return [" ".join(rng.choices(words, k=10)) for _ in range(count)]


def write_mixed_corpus(folder) -> str:
    """The same documents as .txt.gz, .jsonl.zst and .parquet files; returns the joined text."""
    docs = ["\n".join(lines(400, seed)) for seed in range(6)]
    folder.mkdir()
    with gzip.open(folder / "a.txt.gz", "wt") as handle:
        handle.write("\n\n  " + docs[0] + "\n  \n")
    rows = "".join(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(docs[1:3]))
    (folder / "b.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(rows.encode()))
    pq.write_table(pa.table({"text": docs[3:]}), folder / "c.parquet")
    (folder / "notes.md").write_text("not part of the corpus")
    return "\n\n".join(docs)


def config(tmp_path, **fields) -> DataConfig:
    return DataConfig(cache_dir=str(tmp_path / "cache"), **fields)


def small_chunks(monkeypatch, chars: int = 4096, commit_every: int = 2) -> None:
    monkeypatch.setattr(sources, "CHUNK_CHARS", chars)
    monkeypatch.setattr(prepare, "COMMIT_EVERY_CHUNKS", commit_every)


def shard_hashes(prepared) -> dict:
    return {
        split: hashlib.sha256((prepared.directory / f"{split}.bin").read_bytes()).hexdigest()
        for split in ("train", "val")
    }


def test_chunks_rejoin_to_the_text_and_end_at_newlines():
    text = "\n".join(lines(500, 1))
    pieces = [text[i : i + 777] for i in range(0, len(text), 777)]
    chunks = list(iter_chunks(pieces, chunk_chars=2000))
    assert "".join(chunks) == text and len(chunks) > 5
    assert all(c.endswith("\n") for c in chunks[:-1])
    assert all(2000 - 80 <= len(c) <= 2000 for c in chunks[:-1])  # lines are under 80 chars


def test_stripped_drops_only_the_documents_outer_whitespace():
    assert "".join(stripped(["\n  ", " a b \n", "\n", "c\n\n", "  \n"])) == "a b \n\nc"
    assert list(stripped([" ", "\n"])) == []


def test_compressed_jsonl_and_parquet_stream_as_one_text(tmp_path, monkeypatch):
    small_chunks(monkeypatch)
    text = write_mixed_corpus(tmp_path / "mixed")
    prepared = prepare_corpus(config(tmp_path, corpus=str(tmp_path / "mixed")))
    chars = json.loads((prepared.directory / "tokenizer.json").read_text())["chars"]
    decoded = "".join(chars[i] for i in np.concatenate([prepared.train(), prepared.val()]))
    assert decoded == text
    train_text, _ = prepare.split_text(text, 0.1)
    assert prepared.train_tokens == len(train_text)  # the split of the one-string reading


def test_worker_pool_writes_the_same_tokens_as_one_process(tmp_path, monkeypatch):
    small_chunks(monkeypatch, chars=20_000)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines(6000, 2)))
    fields = {"corpus": str(corpus), "tokenizer": "bpe", "vocab_size": 400}
    pooled = prepare_corpus(DataConfig(cache_dir=str(tmp_path / "a"), **fields), workers=2)
    inline = prepare_corpus(DataConfig(cache_dir=str(tmp_path / "b"), **fields), workers=1)
    assert shard_hashes(pooled) == shard_hashes(inline)
    assert pooled.train().dtype == np.uint16 and int(pooled.train().max()) < 400


def test_bpe_learns_from_a_bounded_sample(tmp_path, monkeypatch):
    small_chunks(monkeypatch, chars=20_000)
    scan = prepare.Scan([20_000] * 50, [20_000] * 50, "")
    chosen = prepare.sample_chunks(scan, (45, 0), budget_bytes=200_000)
    assert len(chosen) == 10 and chosen[0] == 0 and chosen[-1] == 44  # evenly spaced, train only
    assert prepare.sample_chunks(scan, (45, 10), budget_bytes=1e9) == list(range(46))


class Killed(BaseException):
    """Stands for SIGKILL: not an Exception, so nothing cleans up after it."""


def test_a_killed_preparation_resumes_to_an_identical_entry(tmp_path, monkeypatch):
    small_chunks(monkeypatch, chars=8_000, commit_every=3)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines(8000, 3)))
    fields = {"corpus": str(corpus), "tokenizer": "bpe", "vocab_size": 300}
    clean = prepare_corpus(DataConfig(cache_dir=str(tmp_path / "clean"), **fields))
    appended = []
    append = prepare.TokenWriter.append

    def dies_midway(self, split, ids):
        appended.append(split)
        if len(appended) == 40:
            raise Killed
        append(self, split, ids)

    monkeypatch.setattr(prepare.TokenWriter, "append", dies_midway)
    with pytest.raises(Killed):
        prepare_corpus(config(tmp_path, **fields))
    building = tmp_path / "cache" / "building" / clean.key
    journal = json.loads((building / "journal.json").read_text())
    assert journal["chunks_done"] == 39 and not (tmp_path / "cache" / "tokens").exists()
    appended.clear()
    resumed = prepare_corpus(config(tmp_path, **fields))
    assert resumed.cache_hit is False and shard_hashes(resumed) == shard_hashes(clean)
    assert (resumed.train_tokens, resumed.val_tokens) == (clean.train_tokens, clean.val_tokens)
    assert len(appended) < 40 + 10  # only the chunks after the last commit were encoded again
    assert not building.exists()


def test_an_entry_without_a_complete_manifest_is_never_used(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines(3000, 4)))
    cfg = config(tmp_path, corpus=str(corpus))
    first = prepare_corpus(cfg)
    manifest = first.directory / "manifest.json"
    manifest.unlink()
    assert cache.load_entry(first.directory, cache_hit=True) is None
    rebuilt = prepare_corpus(cfg)
    assert rebuilt.cache_hit is False and manifest.exists()
    with (first.directory / "train.bin").open("ab") as handle:
        handle.write(b"\0\0")  # token file no longer matches the manifest's count
    assert prepare_corpus(cfg).cache_hit is False
    assert prepare_corpus(cfg).cache_hit is True
    meta = json.loads(manifest.read_text())
    assert meta["sha256"]["train"] == shard_hashes(first)["train"]


def _overwrite_block(path, offset: int, block: bytes) -> None:
    """Overwrite bytes in place: same size, so only the checksum can tell."""
    with path.open("r+b") as handle:
        handle.seek(offset)
        handle.write(block)


def test_bytes_overwritten_in_place_are_found_named_and_rebuilt(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines(3000, 5)))
    cfg = config(tmp_path, corpus=str(corpus))
    clean = prepare_corpus(cfg)
    hashes = shard_hashes(clean)
    train = clean.directory / "train.bin"
    size = train.stat().st_size
    _overwrite_block(train, 4096, b"\xff" * 4096)  # ids 65535: far beyond the vocabulary
    assert train.stat().st_size == size
    said = []
    rebuilt = prepare_corpus(cfg, say=said.append)
    assert rebuilt.cache_hit is False and shard_hashes(rebuilt) == hashes
    assert said == [
        f"token cache entry {clean.directory}: train.bin does not match the SHA-256 in its "
        "manifest (changed on disk); rebuilding it"
    ]
    assert prepare_corpus(cfg, say=said.append).cache_hit is True and len(said) == 1


def test_a_missing_or_truncated_token_file_is_named_and_rebuilt(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines(3000, 8)))
    cfg = config(tmp_path, corpus=str(corpus))
    entry = prepare_corpus(cfg).directory
    said = []
    (entry / "val.bin").unlink()
    assert prepare_corpus(cfg, say=said.append).cache_hit is False
    with (entry / "train.bin").open("r+b") as handle:
        handle.truncate(100)
    assert prepare_corpus(cfg, say=said.append).cache_hit is False
    assert said[0].endswith(": cannot read val.bin (No such file or directory); rebuilding it")
    assert said[1].startswith(f"token cache entry {entry}: train.bin holds 100 bytes, its manifest")


def test_an_unchanged_entry_is_not_hashed_again_but_verify_hashes_it(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines(3000, 6)))
    cfg = config(tmp_path, corpus=str(corpus))
    prepare_corpus(cfg)
    hashed = []
    real = cache.file_sha256
    monkeypatch.setattr(cache, "file_sha256", lambda path: hashed.append(path.name) or real(path))
    assert prepare_corpus(cfg).cache_hit is True and hashed == []  # a stat per file, no hash
    assert prepare_corpus(cfg, verify=True).cache_hit is True
    assert sorted(hashed) == ["train.bin", "val.bin"]


def test_bit_rot_that_keeps_the_stamp_is_found_by_verify_and_by_the_id_check(tmp_path):
    """A failing disk changes bytes without a write through the filesystem: the stamp still
    matches, so only --verify hashes the file; a trial's id check names the entry before the
    embedding would raise an IndexError."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines(3000, 7)))
    cfg = config(tmp_path, corpus=str(corpus))
    clean = prepare_corpus(cfg)
    train = clean.directory / "train.bin"
    _overwrite_block(train, 0, b"\xff" * 4096)
    verified = clean.directory / cache.VERIFIED
    stamps = json.loads(verified.read_text())
    stamps["train"] = cache._stamp(train)  # as if the bytes had changed under the filesystem
    verified.write_text(json.dumps(stamps))
    damaged = prepare_corpus(cfg)
    assert damaged.cache_hit is True
    with pytest.raises(
        InputError,
        match=rf"token cache entry {damaged.directory}: train.bin "
        r"holds token id 65535, beyond its \d+-id vocabulary",
    ):
        damaged.check_ids(damaged.train()[:4096].reshape(8, -1), "train")
    said = []
    assert prepare_corpus(cfg, verify=True, say=said.append).cache_hit is False
    assert len(said) == 1 and "does not match the SHA-256" in said[0]


def test_ids_are_uint16_up_to_65536_tokens_then_uint32():
    assert (token_dtype(2000), token_dtype(65_536), token_dtype(65_537)) == (
        np.uint16,
        np.uint16,
        np.uint32,
    )
