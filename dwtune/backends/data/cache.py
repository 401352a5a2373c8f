"""The token cache: entry identity, the manifest, and the prepared corpus that trials map.

An entry is ``<cache_dir>/tokens/<key>/`` holding ``train.bin`` and ``val.bin`` (raw token ids,
uint16 where the vocabulary fits, else uint32), ``tokenizer.json`` and ``manifest.json``. The
key hashes the corpus content and every setting that changes the ids. An entry is built under
``<cache_dir>/building/<key>/`` and renamed into ``tokens/`` after its manifest is written, so
``tokens/`` only ever holds complete entries, and an entry without a manifest (or whose files
disagree with it) is never used.

The entry checks itself each time it is opened (:func:`entry_problem`): the token files' sizes
against the manifest's counts, and their SHA-256 against the manifest's whenever a file changed
since its hash last matched. "Changed" is read from ``verified.json``, the (size, mtime, ctime,
inode) of each file when its hash last matched: every write to a file moves its ctime, which no
user can set back, so bytes overwritten in place are always hashed again, while an unchanged
entry costs a few ``stat`` calls per trial. Damage that bypasses the filesystem (a failing disk)
leaves the stamp as it was: ``dwtune prepare SPEC --verify`` hashes every file regardless.
A damaged entry is named and rebuilt before any trial reads it.
"""

from __future__ import annotations

import contextlib
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
VERIFIED = "verified.json"  # stat stamps of the token files when their SHA-256 last matched
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

    def check_ids(self, windows: np.ndarray, split: str) -> None:
        """Raise unless every id of ``windows`` is one the tokenizer produces: a larger id
        would index past the embedding (an IndexError deep in torch) or train on noise."""
        top = int(windows.max(initial=0))
        if top >= self.vocab_size:
            raise InputError(
                f"token cache entry {self.directory}: {split}.bin holds token id {top}, beyond "
                f"its {self.vocab_size}-id vocabulary (damaged on disk); remove that entry and "
                f"rerun, or run `dwtune prepare SPEC --verify`, to rebuild it"
            )


def write_manifest(directory: Path, meta: dict) -> None:
    """The last file of an entry: token counts, dtype and a SHA-256 per token file (and the
    stamps of the files just hashed, so the first open need not hash them again)."""
    stamps = {s: _stamp(directory / f"{s}.bin") for s in SPLITS}
    shards = {s: file_sha256(directory / f"{s}.bin") for s in SPLITS}
    _write_stamps(directory, stamps)
    atomic_write_text(directory / MANIFEST, json.dumps({**meta, "sha256": shards}, indent=1))


def _stamp(path: Path) -> list[int]:
    """What changes whenever a file's bytes are written: size, mtime, ctime, inode."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _read_stamps(entry: Path) -> dict:
    try:
        stamps = json.loads((entry / VERIFIED).read_text())
    except (OSError, ValueError):
        return {}
    return stamps if isinstance(stamps, dict) else {}


def _write_stamps(entry: Path, stamps: dict) -> None:
    """Best effort: a read-only cache is still checked, by hashing on every open."""
    with contextlib.suppress(OSError):
        atomic_write_text(entry / VERIFIED, json.dumps(stamps))


def read_manifest(entry: Path) -> dict | None:
    """The entry's manifest if it is one of this cache version, else None."""
    try:
        meta = json.loads((entry / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(meta, dict) and meta.get("cache_version") == CACHE_VERSION
    return meta if ok else None


def _file_problem(path: Path, tokens: int, itemsize: int, sha256: str, hashed: bool) -> str:
    """What is wrong with one token file ("" if nothing): its size, then (when ``hashed``)
    its SHA-256."""
    size = path.stat().st_size
    if size != tokens * itemsize:
        return f"{path.name} holds {size:,} bytes, its manifest {tokens * itemsize:,}"
    if hashed and file_sha256(path) != sha256:
        return f"{path.name} does not match the SHA-256 in its manifest (changed on disk)"
    return ""


def entry_problem(entry: Path, meta: dict, full: bool = False) -> str:
    """Why the entry's token files cannot be used ("" if they can; module doc). ``full``
    hashes every file; else only files changed since their hash last matched."""
    stamps = _read_stamps(entry)
    known = dict(stamps)
    try:
        itemsize = np.dtype(meta["dtype"]).itemsize
        for split in SPLITS:
            path = entry / f"{split}.bin"
            stamp = _stamp(path)  # before hashing: a write during the hash is seen next time
            hashed = full or stamps.get(split) != stamp
            problem = _file_problem(
                path, meta[f"{split}_tokens"], itemsize, meta["sha256"][split], hashed
            )
            if problem:
                return problem
            stamps[split] = stamp
    except OSError as exc:
        return f"cannot read {Path(exc.filename or 'it').name} ({exc.strerror or exc})"
    except (KeyError, TypeError, ValueError):
        return "its manifest lacks token counts, dtype or checksums"
    if stamps != known:  # written only after a hash: an unchanged entry is only read
        _write_stamps(entry, stamps)
    return ""


def load_entry(entry: Path, cache_hit: bool, full: bool = False) -> PreparedCorpus | None:
    """The entry if it is complete and its files check out, else None (see open_entry)."""
    return open_entry(entry, cache_hit, full)[0]


def open_entry(
    entry: Path, cache_hit: bool, full: bool = False
) -> tuple[PreparedCorpus | None, str]:
    """(the entry, "") if it is complete and checks out; (None, why) if it exists but is
    damaged; (None, "") if it is absent or of another cache version."""
    meta = read_manifest(entry)
    if meta is None:
        return None, ""
    problem = entry_problem(entry, meta, full)
    if problem:
        return None, problem
    prepared = _prepared(entry, meta, cache_hit)
    return prepared, "" if prepared else "its manifest lacks the corpus or tokenizer"


def _prepared(entry: Path, meta: dict, cache_hit: bool) -> PreparedCorpus | None:
    try:
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
    except KeyError:
        return None


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
    entry = cache_dir / "tokens" / key
    meta = read_manifest(entry)  # its counts; the files are checked when a run opens it
    return None if meta is None else _prepared(entry, meta, cache_hit=True)
