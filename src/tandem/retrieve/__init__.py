"""Retrievers over index folders, behind one protocol, each an entry of :data:`tandem.registry.RETRIEVERS`
with its settings model; ``open_retriever`` picks by name (default: the index's kind) and validates the
options against that model (an unknown or bad option is a ConfigError naming the valid ones)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from tandem.errors import ConfigError
from tandem.index.index import Index, open_index
from tandem.registry import RETRIEVERS, NoSettings
from tandem.retrieve.base import Retriever
from tandem.retrieve.dense import DenseRetriever
from tandem.retrieve.graph import DEFAULT_GRAPH_RETRIEVAL, GraphRetriever
from tandem.retrieve.hybrid import HybridRetriever
from tandem.retrieve.sparse import BM25Retriever
from tandem.settings import Settings

_G = DEFAULT_GRAPH_RETRIEVAL


class HybridSettings(Settings):
    """Hybrid: BM25 and dense rankings fused."""

    fusion: Literal["rrf", "weighted"] = Field("rrf", description="rrf: reciprocal-rank fusion; weighted: min-max "
                                                                  "normalised scores, weighted")
    weights: list[float] | None = Field(None, min_length=2, max_length=2, description="[bm25, dense] weights "
                                                                                     "(default: equal)")
    depth: int = Field(100, ge=1, le=10_000, description="hits taken from each retriever before fusing")
    rrf_c: float = Field(60.0, gt=0, description="the c of 1 / (c + rank)")


class GraphSettings(Settings):
    """Graph: a first stage, then personalized PageRank over the index's passage graph (docs/retrieval.md)."""

    at_most: ClassVar[tuple[tuple[str, str], ...]] = (("seeds", "depth"),)

    first_stage: Literal["bm25", "dense", "hybrid"] | None = Field(None, description="the seeding retriever "
                                                                                     "(default: the index's kind)")
    fusion: Literal["rrf", "weighted"] = Field("rrf", description="a hybrid first stage's fusion")
    weights: list[float] | None = Field(None, min_length=2, max_length=2, description="a hybrid first stage's "
                                                                                     "[bm25, dense] weights")
    rrf_c: float = Field(60.0, gt=0, description="a hybrid first stage's RRF c")
    seeds: int = Field(_G["seeds"], ge=1, description="top first-stage passages that seed the PageRank")
    damping: float = Field(_G["damping"], ge=0.0, lt=1.0, description="PageRank damping d")
    iterations: int = Field(_G["iterations"], ge=0, le=1000, description="PageRank steps")
    seed_weighting: Literal["score", "rank"] = Field(_G["seed_weighting"], description="seed mass by min-max "
                                                                                       "score or by 1 / rank")
    graph_score: Literal["ppr", "propagated"] = Field(_G["graph_score"], description="ppr: the PageRank vector; "
                                                                                     "propagated: only mass that "
                                                                                     "came over edges")
    reverse_weight: float = Field(_G["reverse_weight"], ge=0.0, description="weight of reversed mention edges")
    entity_weight: float = Field(_G["entity_weight"], ge=0.0, description="weight of shared-entity edges")
    fusion_weight: float = Field(_G["fusion_weight"], ge=0.0, le=1.0, description="graph score's share of the "
                                                                                  "final score")
    link_seeds: float = Field(_G["link_seeds"], ge=0.0, description="seed mass for passages the question names")
    link_boost: float = Field(_G["link_boost"], ge=0.0, description="final-score bonus for passages the question "
                                                                    "names")
    depth: int = Field(_G["depth"], ge=1, le=10_000, description="first-stage depth")
    two_hop: bool = Field(_G["two_hop"], description="second-hop queries 'question + passage' (needs a dense part)")
    hop_passages: int = Field(_G["hop_passages"], ge=1, description="passages that each give a second-hop query")
    hop_weight: float = Field(_G["hop_weight"], ge=0.0, description="weight of the second-hop rankings in RRF")
    expand_hits: int = Field(_G["expand_hits"], ge=0, description="top first-stage passages whose mentioned titles "
                                                                  "get the bridge bonus (0 = off)")
    expand_weight: float = Field(_G["expand_weight"], ge=0.0, description="bridge bonus of a passage mentioned by the "
                                                                          "rank-r hit: expand_weight / r / outdeg^hub_damping")
    hub_damping: float = Field(_G["hub_damping"], ge=0.0, description="how much a hit mentioning many titles spreads "
                                                                      "its vote thinner")
    expand_reverse: float = Field(_G["expand_reverse"], ge=0.0, description="share of the bonus for passages that "
                                                                            "mention a top hit's title")
    ranker: str = Field(_G["ranker"], description="learned re-ordering of the top rerank_depth: learned-v2 (shipped), "
                                                  "learned, a model file's path, or none")
    rerank_depth: int = Field(_G["rerank_depth"], ge=1, description="passages the learned ranker re-orders")
    entity_hits: int = Field(_G["entity_hits"], ge=0, description="the ranker also re-orders the passages sharing an "
                                                                  "entity with the top entity_hits fused (0 = off)")


@RETRIEVERS.register("bm25", needs=("bm25",), doc="BM25 over the index's sparse part (bm25s)")
def _bm25(index: Index, settings: NoSettings) -> BM25Retriever:
    return BM25Retriever(index)


@RETRIEVERS.register("dense", needs=("dense",), doc="inner product over the index's vector store")
def _dense(index: Index, settings: NoSettings) -> DenseRetriever:
    return DenseRetriever(index)


@RETRIEVERS.register("hybrid", settings=HybridSettings, needs=("bm25", "dense"))
def _hybrid(index: Index, s: HybridSettings) -> HybridRetriever:
    return HybridRetriever([BM25Retriever(index), DenseRetriever(index)], **s.model_dump())


_FIRST_STAGE_KEYS = ("fusion", "weights", "rrf_c")


@RETRIEVERS.register("graph", settings=GraphSettings, needs=("graph",))
def _graph(index: Index, s: GraphSettings) -> GraphRetriever:
    """Personalized PageRank over the index's passage graph, seeded by ``first_stage`` (default: the index's kind)."""
    first_kind = s.first_stage or index.kind
    if first_kind == "graph":
        raise ConfigError("the graph retriever's first stage must be bm25, dense or hybrid")
    first_opts = {k: getattr(s, k) for k in _FIRST_STAGE_KEYS} if first_kind == "hybrid" else {}
    first = open_retriever(index, first_kind, **first_opts)
    dense = DenseRetriever(index) if s.two_hop and index.has("dense") else None
    graph = s.model_dump(exclude={"first_stage", *_FIRST_STAGE_KEYS})
    return GraphRetriever(index, first, dense=dense, **graph)


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


__all__ = ["BM25Retriever", "DenseRetriever", "GraphRetriever", "GraphSettings", "HybridRetriever",
           "HybridSettings", "Retriever", "best_retriever", "open_retriever"]
