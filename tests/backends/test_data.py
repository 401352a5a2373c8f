"""Corpora, tokenizers, the token cache and batches."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from dwtune import cli
from dwtune.backends.data import (
    eval_batches,
    prepare,
    prepare_corpus,
    resolve_data_config,
    split_text,
    strip_markdown,
    train_batch,
)
from dwtune.core.errors import InputError
from dwtune.core.spec import DataConfig

WORDS = [
    "the",
    "king",
    "and",
    "queen",
    "of",
    "france",
    "shall",
    "not",
    "go",
    "to",
    "war",
    "with",
    "england",
    "every",
    "man",
    "in",
    "arms",
    "must",
    "stand",
    "ready",
]


def prose(n_words: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    lines = [" ".join(rng.choices(WORDS, k=12)) for _ in range(n_words // 12)]
    return "\n".join(lines) + "\n"


def config(tmp_path, **fields) -> DataConfig:
    return DataConfig(cache_dir=str(tmp_path / "cache"), **fields)


def cache_entries(tmp_path) -> list[str]:
    tokens = tmp_path / "cache" / "tokens"
    return sorted(p.name for p in tokens.iterdir()) if tokens.exists() else []


# --------------------------------------------------------------------------- text


def test_strip_markdown_keeps_the_words_only():
    page = (
        "# Hamlet\n\n## ACT I\n\n### SCENE I. Elsinore.\n\n_Enter BERNARDO_\n\n"
        "**BERNARDO**  \nWho's there?  \n_\\[Aside]_  \n\\--Nay, answer me.\n\n\n\n"
    )
    assert strip_markdown(page) == (
        "Hamlet\n\nACT I\n\nSCENE I. Elsinore.\n\nEnter BERNARDO\n\n"
        "BERNARDO\nWho's there?\n[Aside]\n--Nay, answer me."
    )


def test_split_cuts_at_a_line_boundary():
    text = "".join(f"line {i}\n" for i in range(100))
    train, val = split_text(text, 0.1)
    assert train + val == text
    assert train.endswith("\n") and val.startswith("line ")
    assert 0.08 < len(val) / len(text) < 0.12


def test_relative_paths_become_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    resolved = resolve_data_config(DataConfig(corpus="text.txt", cache_dir="cache"))
    assert resolved.corpus == str(tmp_path / "text.txt")
    assert resolved.cache_dir == str(tmp_path / "cache")
    assert resolve_data_config(DataConfig()).corpus == "shakespeare"


# --------------------------------------------------------------------------- corpora


def test_bundled_shakespeare_char_corpus_is_cached_once(tmp_path):
    cfg = config(tmp_path)
    first = prepare_corpus(cfg)
    second = prepare_corpus(cfg)
    assert (first.cache_hit, second.cache_hit) == (False, True)
    assert first.key == second.key and cache_entries(tmp_path) == [first.key]
    assert first.vocab_size <= 128 and first.train_tokens > 4_000_000
    assert 0.09 < first.val_tokens / (first.train_tokens + first.val_tokens) < 0.11
    train = first.train()
    assert train.dtype == np.uint16 and int(train.max()) < first.vocab_size
    chars = json.loads((first.directory / "tokenizer.json").read_text())["chars"]
    assert "*" not in chars and "#" not in chars  # Markdown stripped
    assert "".join(chars[i] for i in first.val()[:5]) == "".join(chars[i] for i in second.val()[:5])


@pytest.mark.slow  # trains a BPE tokenizer
def test_bpe_with_vocabulary_2000_is_trained_once(tmp_path):
    cfg = config(tmp_path, tokenizer="bpe", vocab_size=2000)
    first = prepare_corpus(cfg)
    second = prepare_corpus(cfg)
    assert (first.cache_hit, second.cache_hit) == (False, True)
    assert cache_entries(tmp_path) == [first.key]
    assert first.vocab_size == 2000
    assert int(first.train().max()) < 2000 and int(first.val().max()) < 2000
    # BPE packs several characters per token
    assert first.train_tokens < 0.5 * prepare_corpus(config(tmp_path)).train_tokens


def test_bpe_is_trained_on_the_training_split_only(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(prose(4000) + "zqxj zqxj zqxj\n" * 300)  # held-out tail only
    cfg = config(tmp_path, corpus=str(corpus), tokenizer="bpe", vocab_size=300, val_fraction=0.2)
    prepared = prepare_corpus(cfg)
    vocab = json.loads((prepared.directory / "tokenizer.json").read_text())["model"]["vocab"]
    assert not any("zq" in token for token in vocab)
    assert any("shall" in token for token in vocab)  # merges learnt from the training text


def test_text_file_folder_and_parquet_corpora(tmp_path):
    text = prose(3000)
    (tmp_path / "one.txt").write_text(text)
    folder = tmp_path / "folder"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text(text[:8000])
    (folder / "sub" / "b.txt").write_text(text[8000:])
    (folder / "ignored.md").write_text("not read")
    pq.write_table(pa.table({"body": [text[:8000], None, text[8000:]]}), tmp_path / "t.parquet")
    single = prepare_corpus(config(tmp_path, corpus=str(tmp_path / "one.txt")))
    joined = prepare_corpus(config(tmp_path, corpus=str(folder)))
    table = prepare_corpus(config(tmp_path, corpus=str(tmp_path / "t.parquet"), text_column="body"))
    assert single.train_tokens + single.val_tokens == len(text.strip())
    documents = "\n\n".join([text[:8000].strip(), text[8000:].strip()])
    assert joined.train_tokens + joined.val_tokens == len(documents)
    assert table.train_tokens + table.val_tokens == len(documents)
    assert len(cache_entries(tmp_path)) == 3


def test_a_failed_write_leaves_nothing_in_the_cache(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(prose(3000))
    calls = []
    append = prepare.TokenWriter.append

    def failing_append(self, split, ids):
        calls.append(split)
        if len(calls) == 2:
            raise OSError("disk full")
        append(self, split, ids)

    monkeypatch.setattr(prepare.TokenWriter, "append", failing_append)
    with pytest.raises(OSError, match="disk full"):
        prepare_corpus(config(tmp_path, corpus=str(corpus)))
    assert cache_entries(tmp_path) == []
    monkeypatch.undo()
    assert prepare_corpus(config(tmp_path, corpus=str(corpus))).cache_hit is False


# --------------------------------------------------------------------------- bad input


def bad_corpora(tmp_path) -> dict:
    (tmp_path / "empty.txt").write_text("  \n")
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "tiny.txt").write_text("To be, or not to be.\n" * 3)
    (tmp_path / "small.txt").write_text(prose(600))
    pq.write_table(pa.table({"content": ["some text " * 500]}), tmp_path / "t.parquet")
    return {
        "missing": ({"corpus": str(tmp_path / "nope.txt")}, "does not exist"),
        "empty file": ({"corpus": str(tmp_path / "empty.txt")}, "holds no text"),
        "empty folder": ({"corpus": str(tmp_path / "empty_dir")}, "holds no .txt files"),
        "too small": (
            {"corpus": str(tmp_path / "tiny.txt"), "seq_len": 64},
            "each split needs at least one sequence of 65 tokens",
        ),
        "char vocab": (
            {"corpus": str(tmp_path / "small.txt"), "vocab_size": 10},
            "distinct characters",
        ),
        "bpe vocab": (
            {"corpus": str(tmp_path / "small.txt"), "tokenizer": "bpe", "vocab_size": 2000},
            "supports only",
        ),
        "parquet column": ({"corpus": str(tmp_path / "t.parquet")}, "'text' is not a column of"),
    }


BAD_CASES = [
    "missing",
    "empty file",
    "empty folder",
    "too small",
    "char vocab",
    "bpe vocab",
    "parquet column",
]


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_corpus_is_an_input_error_and_leaves_no_cache_entry(tmp_path, case):
    fields, message = bad_corpora(tmp_path)[case]
    with pytest.raises(InputError, match=message):
        prepare_corpus(config(tmp_path, **fields))
    assert cache_entries(tmp_path) == []


def write_spec(tmp_path, data_fields: dict) -> str:
    spec = {
        "name": "bad",
        "space": {"depths": [1], "budgets": [1e4]},
        "data": {"cache_dir": str(tmp_path / "cache"), **data_fields},
        "train": {"steps": 2, "batch_size": 2, "eval_every": 2, "eval_batches": 1},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


@pytest.mark.parametrize("case", BAD_CASES)
def test_dwtune_train_reports_a_bad_corpus_in_one_line(tmp_path, capsys, case):
    fields, message = bad_corpora(tmp_path)[case]
    spec = write_spec(tmp_path, fields)
    code = cli.main(["train", spec, "--depth", "1", "--width", "16"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("dwtune train: error: data.") and "\n" not in err
    assert message in err
    assert cache_entries(tmp_path) == []


# --------------------------------------------------------------------------- batches


def test_training_batches_depend_on_seed_and_step_only():
    tokens = np.arange(1000, dtype=np.uint16)
    first = train_batch(tokens, seed=1, step=5, batch_size=4, seq_len=8)
    assert first.shape == (4, 9) and first.dtype == np.int64
    assert np.array_equal(first, train_batch(tokens, seed=1, step=5, batch_size=4, seq_len=8))
    assert not np.array_equal(first, train_batch(tokens, 2, 5, 4, 8))
    assert not np.array_equal(first, train_batch(tokens, 1, 6, 4, 8))
    assert np.all(np.diff(first, axis=1) == 1)  # contiguous windows of the stream


def test_evaluation_batches_are_fixed_and_cover_the_split():
    tokens = np.arange(500, dtype=np.uint16)
    batches = eval_batches(tokens, batches=3, batch_size=4, seq_len=10)
    assert [b.shape for b in batches] == [(4, 11)] * 3
    starts = np.concatenate([b[:, 0] for b in batches])
    assert starts[0] == 0 and starts[-1] == 500 - 11
    assert np.all(np.diff(starts) > 0)
