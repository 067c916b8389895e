"""Retrievers over index folders, behind one protocol; ``open_retriever`` picks by index kind."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tandem.errors import ConfigError
from tandem.index.build import Index, open_index
from tandem.retrieve.base import Retriever
from tandem.retrieve.dense import DenseRetriever
from tandem.retrieve.hybrid import HybridRetriever
from tandem.retrieve.sparse import BM25Retriever


def _hybrid(index: Index, **options: Any) -> HybridRetriever:
    return HybridRetriever([BM25Retriever(index), DenseRetriever(index)], **options)


RETRIEVERS: dict[str, Callable[..., Retriever]] = {
    "bm25": lambda index, **_: BM25Retriever(index),
    "dense": lambda index, **_: DenseRetriever(index),
    "hybrid": _hybrid,
}


def open_retriever(index: str | Path | Index, kind: str | None = None, **options: Any) -> Retriever:
    """A retriever over ``index``; ``kind`` defaults to the index's own kind (bm25, dense or hybrid).

    ``options`` go to the hybrid retriever (fusion, weights, depth, rrf_c).
    """
    idx = index if isinstance(index, Index) else open_index(index)
    kind = kind or idx.kind
    if kind not in RETRIEVERS:
        raise ConfigError(f"unknown retriever {kind!r}; choose one of {sorted(RETRIEVERS)}")
    needed = {"bm25": ("bm25",), "dense": ("dense",), "hybrid": ("bm25", "dense")}[kind]
    missing = [c for c in needed if not idx.has(c)]
    if missing:
        raise ConfigError(f"index {idx.folder} ({idx.kind}) cannot serve a {kind} retriever: it lacks {missing}")
    return RETRIEVERS[kind](idx, **options)


__all__ = ["RETRIEVERS", "BM25Retriever", "DenseRetriever", "HybridRetriever", "Retriever", "open_retriever"]
