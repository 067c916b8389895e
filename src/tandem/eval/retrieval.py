"""Retrieval evaluation: run a retriever over a dataset's questions and score against gold ids."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tandem.eval.retrieval_metrics import retrieval_scores
from tandem.retrieve.base import Retriever
from tandem.types import Question


def evaluate_retrieval(
    questions: Sequence[Question],
    retriever: Retriever,
    ks: Sequence[int] = (2, 5, 10),
    *,
    batch_size: int = 64,
    on_batch: Callable[[int], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per-question records and averaged metrics over the questions that have gold documents."""
    scored = [q for q in questions if q.gold_doc_ids]
    if not scored:
        from tandem.errors import DataError

        raise DataError("no question has gold documents: retrieval cannot be evaluated on this dataset")
    depth = max(max(ks), 10)
    records: list[dict[str, Any]] = []
    for start in range(0, len(scored), batch_size):
        batch = scored[start : start + batch_size]
        for q, hits in zip(batch, retriever.search_batch([q.text for q in batch], depth), strict=True):
            ranked = [h.doc_id for h in hits]
            records.append({
                "id": q.id,
                "question": q.text,
                "gold_doc_ids": list(q.gold_doc_ids),
                "hits": [h.to_dict() for h in hits],
                "scores": retrieval_scores(q.gold_doc_ids, ranked, ks),
            })
        if on_batch is not None:
            on_batch(len(batch))
    keys = list(records[0]["scores"])
    metrics: dict[str, Any] = {k: sum(r["scores"][k] for r in records) / len(records) for k in keys}
    metrics["questions"] = len(records)
    metrics["questions_without_gold"] = len(questions) - len(scored)
    return records, metrics


def check_gold_coverage(questions: Sequence[Question], store: Any, min_share: float, where: str) -> float:
    """The share of the questions' gold passage ids that are in ``store`` (an index's documents); a
    DataError when it is below ``min_share``, so an index over another corpus does not score a silent 0."""
    gold = {g for q in questions for g in q.gold_doc_ids}
    if not gold:
        return 0.0
    present = sum(1 for g in gold if g in store)
    share = present / len(gold)
    if share < min_share:
        from tandem.errors import DataError

        raise DataError(f"only {present} of the {len(gold)} gold passage ids ({share:.1%}) are in the index {where}, "
                        f"below --min-gold-share {min_share}: the index is over another corpus, or the ids differ "
                        "(recall would be meaningless)")
    return share


def latency_ms(retriever: Retriever, queries: Sequence[str], k: int = 10,
               clock: Callable[[], float] | None = None) -> dict[str, float]:
    """Single-query search latency over ``queries`` after one warm-up query: p50 and p95 in milliseconds
    (the nearest-rank p95 of the sorted times). ``clock`` defaults to wall time (``time.perf_counter``);
    ``time.process_time`` gives the CPU time of this process instead, which other processes on a
    shared machine inflate far less."""
    import statistics
    import time

    clock = clock or time.perf_counter
    retriever.search(queries[0], k)
    times = []
    for q in queries:
        start = clock()
        retriever.search(q, k)
        times.append((clock() - start) * 1000)
    times.sort()
    return {"p50_ms": round(statistics.median(times), 2), "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2)}
