"""The Reranker protocol: re-score a first-stage candidate list against a query."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from tandem.retrieve.base import BatchRetriever
from tandem.types import Hit


@runtime_checkable
class Reranker(Protocol):
    """Re-orders candidates; returns at most ``k`` hits with new scores and ranks, best first."""

    name: str

    def rerank(self, query: str, hits: Sequence[Hit], k: int | None = None) -> list[Hit]:
        """Re-score ``hits`` for ``query`` and keep the best ``k`` (all when None)."""
        ...


def ranked(doc_ids: Sequence[str], scores: Sequence[float], source: str, k: int | None,
           min_score: float | None = None) -> list[Hit]:
    """Hits sorted by score (ties keep input order), filtered by ``min_score`` (> min_score kept), cut to k."""
    order = sorted(range(len(doc_ids)), key=lambda i: -scores[i])
    out: list[Hit] = []
    for i in order:
        if min_score is not None and not scores[i] > min_score:
            continue
        out.append(Hit(doc_ids[i], float(scores[i]), len(out) + 1, source))
        if k is not None and len(out) >= k:
            break
    return out


class Reranked(BatchRetriever):
    """A retriever: a first stage's top-``n``, then ``reranker`` (None = the first stage alone). A batch
    of queries goes to the first stage as one batch (a dense stage encodes them together)."""

    def __init__(self, first: Any, reranker: Reranker | None, n: int) -> None:
        self.first, self.reranker, self.n = first, reranker, n
        self.name = first.name + (f"+{reranker.name}" if reranker else "")

    def _search_batch(self, queries: list[str], k: int) -> list[list[Hit]]:
        if self.reranker is None:
            return [hits[:k] for hits in self.first.search_batch(queries, k)]
        firsts = self.first.search_batch(queries, self.n)
        return [self.reranker.rerank(q, hits, k) for q, hits in zip(queries, firsts, strict=True)]
