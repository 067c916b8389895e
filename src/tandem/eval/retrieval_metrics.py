"""Retrieval metrics over a ranked list of document ids and a set of gold ids (binary relevance).

Each is a pure function of one question; averaging over questions is the caller's.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence


def recall_at_k(gold: Collection[str], ranked: Sequence[str], k: int) -> float:
    """|gold ∩ top-k| / |gold|: the fraction of gold documents found in the first k."""
    if not gold:
        raise ValueError("recall is undefined without gold documents")
    return len(set(gold) & set(ranked[:k])) / len(set(gold))


def all_gold_at_k(gold: Collection[str], ranked: Sequence[str], k: int) -> float:
    """1.0 if every gold document is in the first k, else 0.0."""
    if not gold:
        raise ValueError("all-gold is undefined without gold documents")
    return float(set(gold) <= set(ranked[:k]))


def reciprocal_rank(gold: Collection[str], ranked: Sequence[str]) -> float:
    """1 / rank of the first gold document in the list (0.0 if none is retrieved)."""
    gold_set = set(gold)
    for i, doc_id in enumerate(ranked, start=1):
        if doc_id in gold_set:
            return 1.0 / i
    return 0.0


def ndcg_at_k(gold: Collection[str], ranked: Sequence[str], k: int = 10) -> float:
    """nDCG@k with binary gains: DCG = sum over gold hits of 1/log2(rank+1), over the ideal DCG."""
    gold_set = set(gold)
    if not gold_set:
        raise ValueError("nDCG is undefined without gold documents")
    dcg = sum(1.0 / math.log2(i + 1) for i, d in enumerate(ranked[:k], start=1) if d in gold_set)
    ideal = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(gold_set), k) + 1))
    return dcg / ideal


def retrieval_scores(gold: Collection[str], ranked: Sequence[str], ks: Sequence[int]) -> dict[str, float]:
    """All retrieval metrics for one question, keyed like ``recall@5``."""
    scores: dict[str, float] = {}
    for k in ks:
        scores[f"recall@{k}"] = recall_at_k(gold, ranked, k)
        scores[f"all_gold@{k}"] = all_gold_at_k(gold, ranked, k)
    scores["mrr"] = reciprocal_rank(gold, ranked)
    scores["ndcg@10"] = ndcg_at_k(gold, ranked, 10)
    return scores
