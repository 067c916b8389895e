"""One shared single-query search: every batch retriever answers ``search`` as a batch of one."""

from __future__ import annotations

import pytest

from tandem.rerank.rala import SharedDenseRetriever
from tandem.retrieve.base import BatchRetriever, Retriever
from tandem.retrieve.dense import DenseRetriever
from tandem.retrieve.hybrid import HybridRetriever
from tandem.retrieve.sparse import BM25Retriever
from tandem.types import Hit


class Recording(BatchRetriever):
    name = "rec"

    def __init__(self) -> None:
        self.batches: list[tuple[list[str], int]] = []

    def _search_batch(self, queries: list[str], k: int) -> list[list[Hit]]:
        self.batches.append((queries, k))
        return [[Hit(f"{q}-{i}", 1.0 / (i + 1), i + 1, self.name) for i in range(k)] for q in queries]


def test_search_is_a_batch_of_one() -> None:
    r = Recording()
    hits = r.search("paris", 2)
    assert [h.doc_id for h in hits] == ["paris-0", "paris-1"]
    assert r.batches == [(["paris"], 2)]
    assert isinstance(r, Retriever)


def test_an_empty_batch_returns_nothing_without_searching() -> None:
    r = Recording()
    assert r.search_batch([], 5) == []
    assert r.search_batch((), 5) == []
    assert r.batches == []
    assert len(r.search_batch(("a", "b"), 1)) == 2 and r.batches == [(["a", "b"], 1)]


@pytest.mark.parametrize("cls", [BM25Retriever, DenseRetriever, HybridRetriever, SharedDenseRetriever])
def test_the_retrievers_share_it(cls: type) -> None:
    assert issubclass(cls, BatchRetriever)
    assert "search" not in vars(cls) and "search_batch" not in vars(cls)


def test_hybrid_search_uses_the_shared_path() -> None:
    a, b = Recording(), Recording()
    hybrid = HybridRetriever([a, b], depth=3)
    hits = hybrid.search("q", 2)
    assert [h.rank for h in hits] == [1, 2] and hits[0].source == "hybrid"
    assert a.batches == [(["q"], 3)] and b.batches == [(["q"], 3)]
    assert hybrid.search_batch([], 2) == [] and len(a.batches) == 1
