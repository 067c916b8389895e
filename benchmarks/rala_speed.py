"""What RaLa reranking costs per query (CoopRAG, docs/methods/cooprag-measured.md): prints JSON.

The first stage (dense top-n) and RaLa share one forward pass of the query (``SharedDenseRetriever``),
so what reranking adds is the scoring of the n candidates from the features stored at index time.
Measured separately: the query forward pass (paid once, by the first stage) and, for comparison,
Eq. 3 / no stored features (candidates encoded at query time).

    python benchmarks/rala_speed.py --index indexes/cooprag-dev500 \
        --dataset /work/shared/data/hotpotqa/dev500.jsonl --queries 100 --threads 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"mean_ms": round(1000 * statistics.fmean(ordered), 2), "median_ms": round(1000 * statistics.median(ordered), 2),
            "p90_ms": round(1000 * ordered[int(0.9 * (len(ordered) - 1))], 2), "n": len(ordered)}


def _time(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--n", type=int, default=100, help="candidates reranked per query")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--slow-queries", type=int, default=5, help="queries timed for the on-the-fly paths")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from tandem.corpus import load_dataset
    from tandem.index import open_index
    from tandem.rerank.rala import RaLaReranker, SharedDenseRetriever, open_rala

    ds = load_dataset(args.dataset)
    idx = open_index(args.index)
    rala = open_rala(idx)
    first = SharedDenseRetriever(idx, rala)
    queries = [q.text for q in ds.questions[: args.queries]]
    for q in queries[:3]:  # warm-up: model, memory maps
        rala.rerank(q, first.search(q, args.n), args.k)

    forward, first_stage, rerank, changed = [], [], [], 0
    for q in queries:
        rala._cache.clear()
        forward.append(_time(lambda q=q: rala.encode_query(q)))
        hits: list = []
        first_stage.append(_time(lambda q=q, hits=hits: hits.extend(first.search(q, args.n))))
        out: list = []
        rerank.append(_time(lambda q=q, hits=hits, out=out: out.extend(rala.rerank(q, hits, args.k))))
        changed += [h.doc_id for h in out] != [h.doc_id for h in hits[: args.k]]

    slow = {}
    for label, variant in (("eq4_encoded_at_query_time", "eq4"), ("eq3_encoded_at_query_time", "eq3")):
        fly = RaLaReranker(rala.encoder, idx.store, None, layers=rala.layers, cls=rala.cls, variant=variant)
        samples = []
        for q in queries[: args.slow_queries]:
            hits = first.search(q, args.n)
            fly.encode_query(q)
            samples.append(_time(lambda q=q, hits=hits, fly=fly: fly.rerank(q, hits, args.k)))
        slow[label] = _ms(samples)

    print(json.dumps({
        "index": args.index, "docs": len(idx.store), "candidates": args.n, "k": args.k, "threads": args.threads,
        "layers": list(rala.layers), "cls": rala.cls,
        "rerank_added_per_query": _ms(rerank),
        "query_forward_pass_shared_with_first_stage": _ms(forward),
        "faiss_first_stage_after_forward": _ms(first_stage),
        "top_k_changed_fraction": round(changed / len(queries), 3),
        **slow,
    }, indent=2))


if __name__ == "__main__":
    main()
