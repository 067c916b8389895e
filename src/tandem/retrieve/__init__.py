"""Retrievers over index folders, behind one protocol, each an entry of :data:`tandem.registry.RETRIEVERS`
with its settings model, registered in its own module (``sparse``, ``dense``, ``hybrid``, ``graph``); ``open_retriever`` picks by name (default: the index's kind) and validates the
options against that model (an unknown or bad option is a ConfigError naming the valid ones)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tandem.errors import ConfigError
from tandem.index.index import Index, open_index
from tandem.registry import RETRIEVERS
from tandem.retrieve.base import Retriever
from tandem.retrieve.dense import DenseRetriever  # each module registers its retriever where it is defined
from tandem.retrieve.graph import GraphRetriever, GraphSettings, GraphStageSettings
from tandem.retrieve.hybrid import HybridRetriever, HybridSettings
from tandem.retrieve.sparse import BM25Retriever


def best_retriever(index: Index) -> str:
    """The retriever a question-answering run uses when none is named: ``graph`` where the index has the
    graph extra (multi-hop recall: docs/retrieval.md), else the index's own kind."""
    return "graph" if index.has("graph") and index.kind != "graph" else index.kind


def open_retriever(index: str | Path | Index, kind: str | None = None, **options: Any) -> Retriever:
    """A retriever over ``index``; ``kind`` defaults to the index's own kind (bm25, dense or hybrid).

    ``options`` are the retriever's settings (``tandem retrievers NAME`` lists them): checked against its
    settings model, so an unknown key or a bad value is a ConfigError naming the valid ones.
    """
    idx = index if isinstance(index, Index) else open_index(index)
    entry = RETRIEVERS.get(kind or idx.kind)
    settings = entry.validate(options, where=f"{entry.name} retriever settings")
    missing = [c for c in entry.needs if not idx.has(c)]
    if missing:
        extras = [c for c in missing if c not in ("bm25", "dense")]
        fix = f" (add it with `tandem index --add-extras {extras[0]} --index {idx.folder}`)" if extras else ""
        raise ConfigError(f"index {idx.folder} ({idx.kind}) cannot serve a {entry.name} retriever: it lacks "
                          f"{missing}{fix}")
    return entry.build(idx, settings)


__all__ = ["BM25Retriever", "DenseRetriever", "GraphRetriever", "GraphSettings", "GraphStageSettings",
           "HybridRetriever", "HybridSettings", "Retriever", "best_retriever", "open_retriever"]
