"""Streaming corpus preparation: corpus files -> token files, in bounded memory, resumable.

Three passes over the chunk stream (:func:`~.sources.iter_chunks`), none holding more than a
few chunks:

1. scan: characters and UTF-8 bytes per chunk (and the alphabet for ``char``), which fixes the
   split: the held-out tail starts at the first newline after ``1 - val_fraction`` of the
   characters, exactly as if the whole text were one string;
2. tokenizer: ``char`` ids from the alphabet, or byte-level BPE trained on at most
   ``data.bpe_sample_mb`` MB of training chunks, evenly spaced over the training split (all of
   it when it is smaller);
3. encode: chunks go to a pool of worker processes (one per core; bounded in flight) and come
   back in order, appended to ``train.bin`` / ``val.bin``. Every few chunks the files are
   flushed to disk and a journal records how many chunks and tokens are committed.

Everything lives in ``<cache_dir>/building/<key>/`` under a lock file. A killed preparation
leaves its scan, tokenizer and journal there; the next one truncates the token files to the
journal, skips the committed chunks and carries on, so the finished entry is byte-identical to
an uninterrupted one. The manifest is written last and the folder renamed into ``tokens/``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import multiprocessing
import os
import shutil
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from dwtune.backends.data.cache import (
    CACHE_VERSION,
    TOKENIZER,
    PreparedCorpus,
    entry_for,
    load_entry,
    open_entry,
    write_manifest,
)
from dwtune.backends.data.sources import corpus_files, iter_chunks, text_pieces
from dwtune.backends.data.tokenize import (
    Encoder,
    char_vocabulary,
    encode_in_worker,
    init_worker,
    save_char_vocabulary,
    token_dtype,
    train_bpe,
)
from dwtune.core.errors import InputError
from dwtune.core.spec import DataConfig
from dwtune.storage.store import atomic_write_text

COMMIT_EVERY_CHUNKS = 16  # at most this many chunks (~32 MB of text) are encoded again
PARALLEL_MIN_BYTES = 16 << 20  # smaller corpora encode in the calling process by default
IN_FLIGHT_PER_WORKER = 2  # chunks queued per worker: keeps workers busy, memory bounded
MB = 1e6


def available_cores() -> int:
    """Cores this process may run on (the node's, or its cgroup/affinity share)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


# --------------------------------------------------------------------------- pass 1: scan


@dataclass(frozen=True)
class Scan:
    chunk_chars: list[int]
    chunk_bytes: list[int]
    alphabet: str  # distinct characters (char tokenizer only)

    @property
    def total_bytes(self) -> int:
        return sum(self.chunk_bytes)

    def split_at(self, val_fraction: float) -> tuple[int, int]:
        """(chunk, offset in it) of the character where the held-out split would start."""
        cut = int(sum(self.chunk_chars) * (1 - val_fraction))
        start = 0
        for index, chars in enumerate(self.chunk_chars):
            if cut < start + chars:
                return index, cut - start
            start += chars
        return len(self.chunk_chars), 0


def split_chunk(text: str, offset: int, last: bool) -> tuple[str, str]:
    """The chunk cut at the first newline at or after ``offset`` (kept in the training part)."""
    newline = text.find("\n", offset)
    if newline >= 0 and not (last and newline == len(text) - 1):
        offset = newline + 1
    return text[:offset], text[offset:]


def split_text(text: str, val_fraction: float) -> tuple[str, str]:
    """Training text and held-out tail of one string, split as :meth:`Scan.split_at` does."""
    return split_chunk(text, int(len(text) * (1 - val_fraction)), last=True)


def _bar(progress: bool | None, desc: str, total: int | None, initial: int = 0) -> tqdm:
    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        unit="B",
        unit_scale=True,
        disable=None if progress is None else not progress,
        dynamic_ncols=True,
        mininterval=1.0,
    )


def _scan(data: DataConfig, files: list[Path], progress: bool | None) -> Scan:
    chars: list[int] = []
    sizes: list[int] = []
    alphabet: set[str] = set()
    with _bar(progress, "scan", None) as bar:
        for chunk in iter_chunks(text_pieces(data, files)):
            chars.append(len(chunk))
            sizes.append(len(chunk.encode("utf-8")))
            if data.tokenizer == "char":
                alphabet.update(chunk)
            bar.update(sizes[-1])
    if not chars:
        raise InputError(f"data.corpus: {data.corpus} holds no text; pass a non-empty corpus")
    return Scan(chars, sizes, "".join(sorted(alphabet)))


def _load_or_scan(data: DataConfig, files: list[Path], build: Path, progress) -> Scan:
    path = build / "scan.json"
    if path.exists():
        return Scan(**json.loads(path.read_text()))
    scan = _scan(data, files, progress)
    atomic_write_text(path, json.dumps(asdict(scan)))
    return scan


# --------------------------------------------------------------------------- pass 2: tokenizer


def sample_chunks(scan: Scan, split: tuple[int, int], budget_bytes: float) -> list[int]:
    """Training chunks the BPE trainer reads: all of them, or evenly spaced within the budget."""
    last = split[0] if split[1] > 0 else split[0] - 1  # a chunk with training text
    indices = list(range(last + 1))
    train_bytes = sum(scan.chunk_bytes[: last + 1])
    if train_bytes <= budget_bytes or not indices:
        return indices
    count = max(1, int(budget_bytes / (train_bytes / len(indices))))
    return sorted({round(x) for x in np.linspace(0, last, count)})


def _training_sample(data, files, scan: Scan, split: tuple[int, int]) -> Iterator[str]:
    wanted = set(sample_chunks(scan, split, data.bpe_sample_mb * MB))
    final = len(scan.chunk_chars) - 1
    for index, chunk in enumerate(iter_chunks(text_pieces(data, files))):
        if index > max(wanted, default=-1):
            return
        if index in wanted:
            yield split_chunk(chunk, split[1], index == final)[0] if index == split[0] else chunk


def _load_or_train(data, files, scan: Scan, split, build: Path) -> int:
    """Vocabulary size of the build's tokenizer, training and saving it unless saved."""
    path = build / TOKENIZER
    if path.exists():
        saved = json.loads(path.read_text())
        return len(saved["chars"]) if saved.get("type") == "char" else data.vocab_size
    if data.tokenizer == "char":
        return save_char_vocabulary(char_vocabulary(data, set(scan.alphabet)), path)
    return train_bpe(data, _training_sample(data, files, scan, split), path)


# --------------------------------------------------------------------------- pass 3: encode


class TokenWriter:
    """Appends ids to ``train.bin`` / ``val.bin``; commits (fsync + journal) on request."""

    def __init__(self, build: Path, dtype: type):
        self.build, self.itemsize = build, np.dtype(dtype).itemsize
        journal = build / "journal.json"
        saved = json.loads(journal.read_text()) if journal.exists() else {}
        self.chunks_done = saved.get("chunks_done", 0)
        self.tokens = {s: saved.get(f"{s}_tokens", 0) for s in ("train", "val")}
        self.files = {}
        for split, tokens in self.tokens.items():
            handle = (build / f"{split}.bin").open("ab")
            handle.truncate(tokens * self.itemsize)  # drop what was written after the commit
            self.files[split] = handle

    def append(self, split: str, ids: np.ndarray) -> None:
        self.files[split].write(ids.tobytes())
        self.tokens[split] += len(ids)

    def commit(self, chunks_done: int) -> None:
        for handle in self.files.values():
            handle.flush()
            os.fsync(handle.fileno())
        self.chunks_done = chunks_done
        counts = {f"{s}_tokens": n for s, n in self.tokens.items()}
        atomic_write_text(
            self.build / "journal.json", json.dumps({"chunks_done": chunks_done, **counts})
        )

    def close(self) -> None:
        for handle in self.files.values():
            handle.close()


def _tasks(data, files, scan: Scan, split, done: int) -> Iterator[tuple]:
    """(index, split names, texts) of every chunk not yet committed."""
    final = len(scan.chunk_chars) - 1
    for index, chunk in enumerate(iter_chunks(text_pieces(data, files))):
        if index < done:
            continue
        if index < split[0]:
            yield index, ("train",), (chunk,)
        elif index > split[0]:
            yield index, ("val",), (chunk,)
        else:
            yield index, ("train", "val"), split_chunk(chunk, split[1], index == final)


def _encoded(tasks: Iterator[tuple], tokenizer: Path, dtype: type, workers: int) -> Iterator:
    """(task, arrays) in task order: in this process, or on a pool with bounded queueing."""
    if workers <= 1:
        encoder = Encoder(tokenizer, dtype)
        for task in tasks:
            yield task, tuple(encoder(text) for text in task[2])
        return
    context = multiprocessing.get_context("spawn")  # no forked tokenizer threads
    with context.Pool(workers, initializer=init_worker, initargs=(str(tokenizer), dtype)) as pool:
        pending: deque = deque()
        for task in tasks:
            pending.append((task, pool.apply_async(encode_in_worker, (task[2],))))
            if len(pending) >= IN_FLIGHT_PER_WORKER * workers:
                task_done, result = pending.popleft()
                yield task_done, result.get()
        while pending:
            task_done, result = pending.popleft()
            yield task_done, result.get()


def _encode(data, files, scan: Scan, split, build: Path, dtype, workers, progress) -> dict:
    writer = TokenWriter(build, dtype)
    started, tokens_at_start = time.monotonic(), sum(writer.tokens.values())
    initial = sum(scan.chunk_bytes[: writer.chunks_done])
    try:
        with _bar(progress, "encode", scan.total_bytes, initial) as bar:
            tasks = _tasks(data, files, scan, split, writer.chunks_done)
            for (index, names, _), arrays in _encoded(tasks, build / TOKENIZER, dtype, workers):
                for name, ids in zip(names, arrays, strict=True):
                    writer.append(name, ids)
                if (index + 1) % COMMIT_EVERY_CHUNKS == 0:
                    writer.commit(index + 1)
                new_tokens = sum(writer.tokens.values()) - tokens_at_start
                rate = new_tokens / max(time.monotonic() - started, 1e-9)
                bar.set_postfix_str(f"{sum(writer.tokens.values()):,} tokens, {rate:,.0f} tok/s")
                bar.update(scan.chunk_bytes[index])
        writer.commit(len(scan.chunk_chars))
    finally:
        writer.close()
    return dict(writer.tokens)


# --------------------------------------------------------------------------- the build


@contextlib.contextmanager
def _build_lock(building: Path, key: str) -> Iterator[None]:
    """One preparation per entry at a time (others wait, then find the entry published)."""
    building.mkdir(parents=True, exist_ok=True)
    with (building / f"{key}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(data: DataConfig, files, key: str, entry: Path, workers: int, progress) -> None:
    build = Path(data.cache_dir) / "building" / key
    build.mkdir(parents=True, exist_ok=True)
    try:
        scan = _load_or_scan(data, files, build, progress)
        split = scan.split_at(data.val_fraction)
        vocab = _load_or_train(data, files, scan, split, build)
        dtype = token_dtype(vocab)
        tokens = _encode(data, files, scan, split, build, dtype, workers, progress)
        meta = {
            "key": key,
            "corpus": data.corpus,
            "tokenizer": data.tokenizer,
            "vocab_size": vocab,
            "dtype": np.dtype(dtype).name,
            "train_tokens": tokens["train"],
            "val_tokens": tokens["val"],
            "text_bytes": scan.total_bytes,
            "text_chars": sum(scan.chunk_chars),
            "cache_version": CACHE_VERSION,
        }
        PreparedCorpus(
            entry, key, data.corpus, data.tokenizer, vocab, tokens["train"], tokens["val"], False
        ).check_fits(data.seq_len, data.vocab_size)
    except InputError:
        shutil.rmtree(build, ignore_errors=True)  # the same input fails the same way again
        raise
    for scratch in ("scan.json", "journal.json"):
        (build / scratch).unlink()
    write_manifest(build, meta)  # last: marks the folder complete
    if entry.exists():
        shutil.rmtree(entry)  # an entry without a valid manifest, from an older version
    entry.parent.mkdir(parents=True, exist_ok=True)
    os.rename(build, entry)


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


def _say_on_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def prepare_corpus(
    data: DataConfig,
    workers: int | None = None,
    progress: bool | None = False,
    *,
    verify: bool = False,
    say: Callable[[str], None] = _say_on_stderr,
) -> PreparedCorpus:
    """Tokenize ``data``'s corpus into the cache once; later calls are cheap cache hits.

    ``workers``: encoding processes (default: this node's cores; small corpora encode in this
    process). ``progress``: show progress bars (None: only on a terminal). Safe to call from
    several processes at once. Raises InputError for a missing, empty or too small corpus and
    an unfit vocabulary, leaving nothing in the cache. An entry whose files fail their check
    (:func:`~.cache.entry_problem`; every file hashed with ``verify``) is named through
    ``say`` and rebuilt.
    """
    from dwtune.backends.data.sources import resolve_data_config

    data = resolve_data_config(data)
    files = corpus_files(data)
    _check_writable(Path(data.cache_dir))
    key, entry = entry_for(data, files)
    prepared, _ = open_entry(entry, cache_hit=True, full=verify)
    if prepared is None:
        with _build_lock(Path(data.cache_dir) / "building", key):
            # published (or found damaged and rebuilt) by another process while we waited
            prepared, problem = open_entry(entry, cache_hit=True, full=verify)
            if prepared is None:
                if problem:
                    say(f"token cache entry {entry}: {problem}; rebuilding it")
                size = sum(p.stat().st_size for p in files)
                small = size < PARALLEL_MIN_BYTES  # worker start-up would cost more than it saves
                parallel = workers or (1 if small else available_cores())
                _build(data, files, key, entry, parallel, progress)
                prepared = load_entry(entry, cache_hit=False)
    prepared.check_fits(data.seq_len, data.vocab_size)
    return prepared
