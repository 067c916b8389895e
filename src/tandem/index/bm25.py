"""BM25 index files with bm25s (English stop words, Snowball stemming over title + text)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bm25s
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


def build_bm25(docs: Sequence[Document], folder: Path, params: dict[str, Any]) -> None:
    """Index ``docs`` (title + text) and save the sparse matrices under ``folder/bm25``."""
    model = bm25s.BM25(k1=params["k1"], b=params["b"], method=params["method"])
    model.index(tokenize([d.contents for d in docs], params), show_progress=False)
    model.save(str(folder / BM25_DIR), show_progress=False)


def load_bm25(folder: Path, mmap: bool = False) -> bm25s.BM25:
    """Load the saved BM25 model of an index folder."""
    return bm25s.BM25.load(str(folder / BM25_DIR), mmap=mmap, show_progress=False)
