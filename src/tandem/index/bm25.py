"""BM25 index files with bm25s (English stop words, Snowball stemming over title + text).

An index is built from a streamed token pass (:class:`BM25Builder`): texts are tokenised batch by
batch with bm25s' own ``Tokenizer`` and their token ids appended to a file, so no text is held.
bm25s then computes the score matrix from those ids in one go: it holds the vocabulary, one
(score, doc, term) triple per distinct term of each document while it builds (12 bytes each) and
the resulting sparse matrix; bm25s cannot extend a built index (IDF and the mean document length
change with every document), so adding documents re-runs this pass over all of them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import Stemmer

from tandem.types import Document

BM25_DIR = "bm25"
DEFAULT_BM25 = {"k1": 1.5, "b": 0.75, "method": "lucene", "stemmer": "english", "stopwords": "en"}


def _stemmer(name: str | None) -> Any:
    return Stemmer.Stemmer(name) if name else None


def tokenize(texts: Sequence[str], params: dict[str, Any]) -> list[list[str]]:
    """The same tokenisation for documents and queries: lower-case words, stop words out, stems."""
    return bm25s.tokenize(
        list(texts),
        stopwords=params["stopwords"],
        stemmer=_stemmer(params["stemmer"]),
        return_ids=False,
        show_progress=False,
    )


def build_bm25(docs: Iterable[Document], folder: Path, params: dict[str, Any]) -> None:
    """Index ``docs`` (title + text) and save the sparse matrices under ``folder/bm25``."""
    builder = BM25Builder(params, folder)
    builder.add([d.contents for d in docs])
    builder.save(folder)


class _TokenRows(Sequence[list[int]]):
    """Per-document token ids read back from the flat file :class:`BM25Builder` wrote."""

    def __init__(self, path: Path, lengths: list[int]) -> None:
        self.ends = np.cumsum(np.asarray(lengths, dtype=np.int64))
        self.ids = np.memmap(path, dtype=np.int32, mode="r") if self.ends[-1] else np.zeros(0, np.int32)

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, i: int) -> list[int]:  # type: ignore[override]
        start = int(self.ends[i - 1]) if i else 0
        return self.ids[start:int(self.ends[i])].tolist()

    def __iter__(self) -> Iterator[list[int]]:
        return (self[i] for i in range(len(self)))


class BM25Builder:
    """A bm25s index built from texts given batch by batch (see the module's note on memory).

    ``add(texts)`` tokenises exactly as :func:`tokenize` does (same words, stop words, stems) and
    appends the ids to ``<work>/.bm25-tokens.bin``; ``save(folder)`` scores and writes ``folder/bm25``
    and removes the token file."""

    def __init__(self, params: dict[str, Any], work: Path) -> None:
        self.params = params
        self.tokenizer = bm25s.tokenization.Tokenizer(stopwords=params["stopwords"], stemmer=_stemmer(params["stemmer"]))
        self.path = work / ".bm25-tokens.bin"
        self.handle = open(self.path, "wb")  # noqa: SIM115 - closed in save()
        self.lengths: list[int] = []

    def add(self, texts: Sequence[str]) -> None:
        """Tokenise ``texts`` (the next documents in index order)."""
        for ids in self.tokenizer.streaming_tokenize(list(texts), allow_empty=False):
            self.handle.write(np.asarray(ids, dtype=np.int32).tobytes())
            self.lengths.append(len(ids))

    def save(self, folder: Path) -> None:
        """Score every document added and save the index under ``folder/bm25``."""
        self.handle.close()
        try:
            model = bm25s.BM25(k1=self.params["k1"], b=self.params["b"], method=self.params["method"])
            rows = _TokenRows(self.path, self.lengths)
            model.index(bm25s.tokenization.Tokenized(ids=rows, vocab=self.tokenizer.get_vocab_dict()),
                        show_progress=False)
            del rows
            model.save(str(folder / BM25_DIR), show_progress=False)
        finally:
            os.unlink(self.path)


def load_bm25(folder: Path, mmap: bool = False) -> bm25s.BM25:
    """Load the saved BM25 model of an index folder."""
    return bm25s.BM25.load(str(folder / BM25_DIR), mmap=mmap, show_progress=False)
