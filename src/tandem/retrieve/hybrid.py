"""Hybrid retrieval: fuse the rankings of several retrievers.

- ``rrf`` (default): reciprocal-rank fusion, score(d) = sum_r w_r / (c + rank_r(d)), c = 60
  (Cormack, Clarke & Buettcher, SIGIR 2009).
- ``weighted``: sum_r w_r * minmax_r(score_r(d)) over each retriever's candidate list.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from tandem.errors import ConfigError
from tandem.index.index import Index
from tandem.registry import RETRIEVERS
from tandem.retrieve.base import BatchRetriever, Retriever
from tandem.retrieve.dense import DenseRetriever
from tandem.retrieve.sparse import BM25Retriever
from tandem.settings import Settings
from tandem.types import Hit

FUSIONS = ("rrf", "weighted")


def rrf_scores(rankings: Sequence[list[Hit]], weights: Sequence[float], c: float = 60.0) -> dict[str, float]:
    """Reciprocal-rank fusion of several rankings."""
    fused: dict[str, float] = {}
    for hits, w in zip(rankings, weights, strict=True):
        for hit in hits:
            fused[hit.doc_id] = fused.get(hit.doc_id, 0.0) + w / (c + hit.rank)
    return fused


def weighted_scores(rankings: Sequence[list[Hit]], weights: Sequence[float]) -> dict[str, float]:
    """Weighted sum of min-max normalised scores; a document missing from a list gets 0 there."""
    fused: dict[str, float] = {}
    for hits, w in zip(rankings, weights, strict=True):
        if not hits:
            continue
        lo, hi = min(h.score for h in hits), max(h.score for h in hits)
        span = hi - lo or 1.0
        for hit in hits:
            fused[hit.doc_id] = fused.get(hit.doc_id, 0.0) + w * (hit.score - lo) / span
    return fused


class HybridRetriever(BatchRetriever):
    """Runs each retriever to ``depth`` and fuses their rankings."""

    name = "hybrid"

    def __init__(
        self,
        retrievers: Sequence[Retriever],
        *,
        fusion: str = "rrf",
        weights: Sequence[float] | None = None,
        depth: int = 100,
        rrf_c: float = 60.0,
    ) -> None:
        if fusion not in FUSIONS:
            raise ConfigError(f"unknown fusion {fusion!r}; choose one of {sorted(FUSIONS)}")
        self.retrievers = list(retrievers)
        self.weights = list(weights) if weights is not None else [1.0] * len(self.retrievers)
        if len(self.weights) != len(self.retrievers):
            raise ConfigError(f"{len(self.weights)} fusion weights for {len(self.retrievers)} retrievers")
        self.fusion, self.depth, self.rrf_c = fusion, depth, rrf_c

    def _search_batch(self, queries: list[str], k: int) -> list[list[Hit]]:
        depth = max(self.depth, k)
        per_retriever = [r.search_batch(queries, depth) for r in self.retrievers]
        out = []
        for qi in range(len(queries)):
            rankings = [runs[qi] for runs in per_retriever]
            if self.fusion == "rrf":
                fused = rrf_scores(rankings, self.weights, self.rrf_c)
            else:
                fused = weighted_scores(rankings, self.weights)
            best = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
            out.append([Hit(doc_id, score, i + 1, self.name) for i, (doc_id, score) in enumerate(best)])
        return out


class HybridSettings(Settings):
    """Hybrid: BM25 and dense rankings fused."""

    fusion: Literal["rrf", "weighted"] = Field("rrf", description="rrf: reciprocal-rank fusion; weighted: min-max "
                                                                  "normalised scores, weighted")
    weights: list[float] | None = Field(None, min_length=2, max_length=2, description="[bm25, dense] weights "
                                                                                     "(default: equal)")
    depth: int = Field(100, ge=1, le=10_000, description="hits taken from each retriever before fusing")
    rrf_c: float = Field(60.0, gt=0, description="the c of 1 / (c + rank)")


@RETRIEVERS.register("hybrid", settings=HybridSettings, needs=("bm25", "dense"))
def _hybrid(index: Index, s: HybridSettings) -> HybridRetriever:
    return HybridRetriever([BM25Retriever(index), DenseRetriever(index)], **s.model_dump())
