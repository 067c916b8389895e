"""Retrievers over index folders, behind one protocol, each an entry of :data:`tandem.registry.RETRIEVERS`
with its settings model; ``open_retriever`` picks by name (default: the index's kind) and validates the
options against that model (an unknown or bad option is a ConfigError naming the valid ones)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from tandem.errors import ConfigError
from tandem.index.index import Index, open_index
from tandem.registry import RETRIEVERS, NoSettings
from tandem.retrieve.base import Retriever
from tandem.retrieve.dense import DenseRetriever
from tandem.retrieve.graph import GraphRetriever, GraphSettings, GraphStageSettings
from tandem.retrieve.hybrid import HybridRetriever
from tandem.retrieve.sparse import BM25Retriever
from tandem.settings import Settings


class HybridSettings(Settings):
    """Hybrid: BM25 and dense rankings fused."""

    fusion: Literal["rrf", "weighted"] = Field("rrf", description="rrf: reciprocal-rank fusion; weighted: min-max "
                                                                  "normalised scores, weighted")
    weights: list[float] | None = Field(None, min_length=2, max_length=2, description="[bm25, dense] weights "
                                                                                     "(default: equal)")
    depth: int = Field(100, ge=1, le=10_000, description="hits taken from each retriever before fusing")
    rrf_c: float = Field(60.0, gt=0, description="the c of 1 / (c + rank)")


@RETRIEVERS.register("bm25", needs=("bm25",), doc="BM25 over the index's sparse part (bm25s)")
def _bm25(index: Index, settings: NoSettings) -> BM25Retriever:
    return BM25Retriever(index)


@RETRIEVERS.register("dense", needs=("dense",), doc="inner product over the index's vector store")
def _dense(index: Index, settings: NoSettings) -> DenseRetriever:
    return DenseRetriever(index)


@RETRIEVERS.register("hybrid", settings=HybridSettings, needs=("bm25", "dense"))
def _hybrid(index: Index, s: HybridSettings) -> HybridRetriever:
    return HybridRetriever([BM25Retriever(index), DenseRetriever(index)], **s.model_dump())


@RETRIEVERS.register("graph", settings=GraphSettings, needs=("graph",))
def _graph(index: Index, s: GraphSettings) -> GraphRetriever:
    """Personalized PageRank over the index's passage graph, seeded by ``first_stage`` (default: the index's kind)."""
    first_kind = s.first_stage or index.kind
    if first_kind == "graph":
        raise ConfigError("the graph retriever's first stage must be bm25, dense or hybrid")
    stage = set(GraphStageSettings.model_fields)
    first_opts = s.model_dump(exclude={"first_stage", *stage}) if first_kind == "hybrid" else {}
    first = open_retriever(index, first_kind, **first_opts)
    dense = DenseRetriever(index) if s.two_hop and index.has("dense") else None
    return GraphRetriever(index, first, dense=dense, **s.model_dump(include=stage))


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
