"""Retrievers over index folders, behind one protocol; ``open_retriever`` picks by index kind."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tandem.errors import ConfigError
from tandem.index.build import Index, open_index
from tandem.index.graph import GRAPH_ARRAYS
from tandem.retrieve.base import Retriever
from tandem.retrieve.dense import DenseRetriever
from tandem.retrieve.graph import GraphRetriever, missing_graph_message
from tandem.retrieve.hybrid import HybridRetriever
from tandem.retrieve.sparse import BM25Retriever


def _hybrid(index: Index, **options: Any) -> HybridRetriever:
    return HybridRetriever([BM25Retriever(index), DenseRetriever(index)], **options)


def _graph(index: Index, first_stage: str | None = None, **options: Any) -> GraphRetriever:
    """Personalized PageRank over the index's passage graph, seeded by ``first_stage`` (default: the
    index's kind); hybrid options (fusion, rrf_c, weights) go to that first stage, the rest to the graph."""
    if any(name not in index.manifest.extras for name in GRAPH_ARRAYS):
        raise ConfigError(missing_graph_message(index.folder))
    first_kind = first_stage or index.kind
    if first_kind == "graph":
        raise ConfigError("the graph retriever's first stage must be bm25, dense or hybrid")
    hybrid_keys = {"fusion", "weights", "rrf_c"}
    first = open_retriever(index, first_kind, **{k: v for k, v in options.items() if k in hybrid_keys and first_kind == "hybrid"})
    dense = DenseRetriever(index) if options.get("two_hop") and index.has("dense") else None
    return GraphRetriever(index, first, dense=dense, **{k: v for k, v in options.items() if k not in hybrid_keys})


RETRIEVERS: dict[str, Callable[..., Retriever]] = {
    "bm25": lambda index, **_: BM25Retriever(index),
    "dense": lambda index, **_: DenseRetriever(index),
    "hybrid": _hybrid,
    "graph": _graph,
}
# index components each retriever needs (the graph retriever checks its first stage and extra itself)
NEEDS: dict[str, tuple[str, ...]] = {"bm25": ("bm25",), "dense": ("dense",), "hybrid": ("bm25", "dense"), "graph": ()}


def open_retriever(index: str | Path | Index, kind: str | None = None, **options: Any) -> Retriever:
    """A retriever over ``index``; ``kind`` defaults to the index's own kind (bm25, dense or hybrid).

    ``options`` go to the hybrid retriever (fusion, weights, depth, rrf_c) or the graph retriever
    (first_stage, seeds, damping, iterations, ... : ``tandem.retrieve.graph.DEFAULT_GRAPH_RETRIEVAL``).
    """
    idx = index if isinstance(index, Index) else open_index(index)
    kind = kind or idx.kind
    if kind not in RETRIEVERS:
        raise ConfigError(f"unknown retriever {kind!r}; choose one of {sorted(RETRIEVERS)}")
    missing = [c for c in NEEDS[kind] if not idx.has(c)]
    if missing:
        raise ConfigError(f"index {idx.folder} ({idx.kind}) cannot serve a {kind} retriever: it lacks {missing}")
    return RETRIEVERS[kind](idx, **options)


__all__ = ["RETRIEVERS", "BM25Retriever", "DenseRetriever", "GraphRetriever", "HybridRetriever", "Retriever", "open_retriever"]
