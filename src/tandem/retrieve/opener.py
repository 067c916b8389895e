"""Opening a retriever by name over an index (:func:`open_retriever`) and the one a question-answering run uses
where none is named (:func:`best_retriever`). Its own module, so a retriever's builder that opens another one
(the graph's first stage) imports it without importing the package that imports that retriever."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tandem.errors import ConfigError
from tandem.index.index import Index, open_index
from tandem.registry import RETRIEVERS
from tandem.retrieve.base import Retriever


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


__all__ = ["best_retriever", "open_retriever"]
