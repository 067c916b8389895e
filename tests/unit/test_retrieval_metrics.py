"""Retrieval metrics on hand-computed cases, and fusion arithmetic."""

from __future__ import annotations

import math

import pytest

from tandem.eval.retrieval_metrics import all_gold_at_k, ndcg_at_k, recall_at_k, reciprocal_rank, retrieval_scores
from tandem.retrieve.hybrid import rrf_scores, weighted_scores
from tandem.types import Hit


def test_recall_and_all_gold():
    ranked = ["a", "x", "b", "y"]
    assert recall_at_k({"a", "b"}, ranked, 2) == 0.5
    assert recall_at_k({"a", "b"}, ranked, 3) == 1.0
    assert all_gold_at_k({"a", "b"}, ranked, 2) == 0.0
    assert all_gold_at_k({"a", "b"}, ranked, 3) == 1.0


def test_mrr():
    assert reciprocal_rank({"b"}, ["a", "x", "b"]) == pytest.approx(1 / 3)
    assert reciprocal_rank({"z"}, ["a"]) == 0.0


def test_ndcg():
    # gold at ranks 1 and 3 of two gold docs: (1 + 1/log2(4)) / (1 + 1/log2(3))
    expected = (1 + 1 / 2) / (1 + 1 / math.log2(3))
    assert ndcg_at_k({"a", "b"}, ["a", "x", "b"], 10) == pytest.approx(expected)
    assert ndcg_at_k({"a"}, ["a"], 10) == 1.0


def test_undefined_without_gold():
    with pytest.raises(ValueError):
        recall_at_k(set(), ["a"], 1)


def test_retrieval_scores_keys():
    s = retrieval_scores({"a"}, ["a"], [2, 5])
    assert set(s) == {"recall@2", "all_gold@2", "recall@5", "all_gold@5", "mrr", "ndcg@10"}


def test_rrf_and_weighted_fusion():
    run1 = [Hit("a", 9.0, 1, "bm25"), Hit("b", 5.0, 2, "bm25")]
    run2 = [Hit("b", 0.9, 1, "dense"), Hit("c", 0.1, 2, "dense")]
    rrf = rrf_scores([run1, run2], [1.0, 1.0], c=60)
    assert rrf["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert rrf["a"] == pytest.approx(1 / 61)
    assert max(rrf, key=rrf.get) == "b"
    w = weighted_scores([run1, run2], [0.3, 0.7])
    assert w == pytest.approx({"a": 0.3, "b": 0.7, "c": 0.0})


def test_latency_ms_uses_the_given_clock_for_p50_and_p95():
    from tandem.eval.retrieval import latency_ms

    now = [0.0]

    class Stepping:
        """A search that takes (in clock seconds) as many milliseconds as the query's number."""

        def search(self, query, k=10):
            now[0] += int(query) / 1000
            return []

    times = latency_ms(Stepping(), [str(i) for i in range(1, 21)], clock=lambda: now[0])
    assert times == {"p50_ms": 10.5, "p95_ms": 19.0}
