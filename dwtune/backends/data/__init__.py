"""Corpora, tokenizers, the on-disk token cache and batches.

- :mod:`.sources`: which files a corpus reads and its text as a stream of line-aligned chunks;
- :mod:`.tokenize`: char and byte-level BPE tokenizers and the chunk encoder;
- :mod:`.prepare`: streaming, parallel, resumable preparation into the cache;
- :mod:`.cache`: entry identity, manifest and the prepared corpus trials memory-map;
- :mod:`.batches`: training and evaluation windows.
"""

from __future__ import annotations

import numpy as np

from dwtune.backends.data.batches import eval_batches, train_batch
from dwtune.backends.data.cache import PreparedCorpus, entry_for, find_prepared, load_entry
from dwtune.backends.data.prepare import prepare_corpus, split_text
from dwtune.backends.data.sources import (
    corpus_files,
    resolve_data_config,
    strip_markdown,
)

__all__ = [
    "PreparedCorpus",
    "corpus_files",
    "entry_for",
    "eval_batches",
    "find_prepared",
    "load_entry",
    "np",
    "prepare_corpus",
    "resolve_data_config",
    "split_text",
    "strip_markdown",
    "train_batch",
]
