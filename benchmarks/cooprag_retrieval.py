"""CoopRAG retrieval figures (docs/methods/cooprag-measured.md): R@2 / R@5 of the final top-5; prints JSON.

Modes:
- ``grid``: question-only queries; first stages dense / hybrid (top-n), each alone and reranked by
  RaLa under every setting in ``--grid`` (layer sets x [CLS] definition x with/without w). Tune on
  one half of the questions, report on the other (``--questions 250:500`` vs ``0:250``).
- ``eq3``: the paper's full per-token variant (Eq. 3) against Eq. 4 after the dense first stage.
- ``unrolled``: the LLM unrolls the first questions (cached in ``--unroll-cache``), then every query
  composition of the paper's Table 16 (q, q+s, q+r, q+s+r) is scored with dense and dense + RaLa.

    python benchmarks/cooprag_retrieval.py grid --index indexes/cooprag-dev500 \
        --dataset /work/shared/data/hotpotqa/dev500.jsonl --questions 250:500
    python benchmarks/cooprag_retrieval.py unrolled --index indexes/cooprag-dev500 \
        --dataset /work/shared/data/hotpotqa/dev500.jsonl --questions 0:50 --llm local \
        --unroll-cache runs/cooprag/unroll-dev500.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
from collections.abc import Sequence
from pathlib import Path

from tandem.eval.retrieval import evaluate_retrieval
from tandem.index import Index
from tandem.rerank.base import Reranked
from tandem.rerank.rala import RaLaReranker
from tandem.retrieve.base import Retriever
from tandem.types import Hit, Question

LAYER_SETS = {"3": (3,), "0": (0,), "1": (1,), "2": (2,), "4": (4,), "5": (5,), "0,2,4": (0, 2, 4),
              "1,3,5": (1, 3, 5), "0,3": (0, 3), "2,4": (2, 4), "0..5": (0, 1, 2, 3, 4, 5)}


def _score(questions: list[Question], retriever: Retriever) -> dict[str, float]:
    _, metrics = evaluate_retrieval(questions, retriever, (2, 5))
    return {"R@2": round(100 * metrics["recall@2"], 1), "R@5": round(100 * metrics["recall@5"], 1)}


class Cached:
    """Memoises a first stage so every reranker setting sees the same candidates at no extra cost."""

    def __init__(self, inner: Retriever) -> None:
        self.inner, self.name, self.memo = inner, inner.name, {}

    def search(self, query: str, k: int = 10) -> list[Hit]:
        if (query, k) not in self.memo:
            self.memo[(query, k)] = self.inner.search(query, k)
        return self.memo[(query, k)]

    def search_batch(self, queries: Sequence[str], k: int = 10) -> list[list[Hit]]:
        return [self.search(q, k) for q in queries]


def _stages(idx: Index, rala: RaLaReranker) -> dict[str, Retriever]:
    from tandem.rerank.rala import SharedDenseRetriever
    from tandem.retrieve import open_retriever

    dense = Cached(SharedDenseRetriever(idx, rala))
    stages: dict[str, Retriever] = {"dense": dense}
    if idx.has("bm25"):
        from tandem.retrieve import BM25Retriever, HybridRetriever

        stages["hybrid"] = Cached(HybridRetriever([BM25Retriever(idx), dense]))
        stages["bm25"] = Cached(open_retriever(idx, "bm25"))
    return stages


def grid(args: argparse.Namespace, questions: list[Question], idx: Index, rala: RaLaReranker) -> dict:
    out: dict = {}
    for stage_name, stage in _stages(idx, rala).items():
        rows = {"first stage": _score(questions, Reranked(stage, None, args.n))}
        for fuse, cls, layers, omega in itertools.product(args.fuse, args.cls, args.grid, (True, False)):
            if not omega and (layers != args.grid[0] or cls != args.cls[0]):
                continue  # without w neither the layer set nor the sentence vector plays a part
            rala.fuse, rala.cls, rala.layers, rala.omega = fuse, cls, LAYER_SETS[layers], omega
            label = f"rala fuse={fuse} " + (f"cls={cls} C={{{layers}}}" if omega else "no w (MaxSim only)")
            rows[label] = _score(questions, Reranked(stage, rala, args.n))
        out[stage_name] = rows
    return out


def eq3(args: argparse.Namespace, questions: list[Question], idx: Index, rala: RaLaReranker) -> dict:
    """Eq. 3 (per-token gap; candidates encoded at query time, slow) against Eq. 4, dense first stage."""
    from tandem.rerank.rala import RaLaReranker

    stage = _stages(idx, rala)["dense"]
    full = RaLaReranker(rala.encoder, idx.store, None, layers=rala.layers, cls=rala.cls, variant="eq3")
    memo: dict = {}
    score = full.scores
    full.scores = lambda q, ids: memo.setdefault((q, tuple(ids)), score(q, ids))  # type: ignore[method-assign]
    rows = {"first stage": _score(questions, Reranked(stage, None, args.n))}
    for reranker, label in ((rala, "eq4"), (full, "eq3")):
        for fuse in args.fuse:
            reranker.fuse = fuse
            rows[f"rala {label} fuse={fuse} C={set(reranker.layers)}"] = _score(questions, Reranked(stage, reranker, args.n))
    return rows


def unrolled(args: argparse.Namespace, questions: list[Question], idx: Index, rala: RaLaReranker) -> dict:
    from tandem.llm import load_llm
    from tandem.methods.base import Search
    from tandem.methods.cooprag.algorithm import QUERY_PARTS, CoopRAG, render_query
    from tandem.methods.cooprag.prompts import Unrolled
    from tandem.types import Step

    cache = Path(args.unroll_cache)
    done = {}
    if cache.exists():
        done = {r["id"]: r for r in map(json.loads, cache.read_text(encoding="utf-8").splitlines())}
    llm = load_llm(args.llm, **({"cache": args.llm_cache} if args.llm_cache else {}))
    method = CoopRAG(llm, Search(_stages(idx, rala)["dense"], idx.store), rala)
    cache.parent.mkdir(parents=True, exist_ok=True)
    with cache.open("a", encoding="utf-8") as handle:
        for q in questions:
            if q.id in done:
                continue
            step = Step("unroll")
            u = method.unroll(q.text, step)
            done[q.id] = {"id": q.id, "sub_questions": list(u.sub_questions), "chain": [list(t) for t in u.chain],
                          "fallback": step.notes.get("fallback"), "calls": len(step.llm_calls),
                          "seconds": round(sum(c.latency_s for c in step.llm_calls), 2)}
            handle.write(json.dumps(done[q.id], ensure_ascii=False) + "\n")
            handle.flush()
    recs = [done[q.id] for q in questions]
    units = {q.id: Unrolled(tuple(r["sub_questions"]), tuple(tuple(t) for t in r["chain"])) for q, r in zip(questions, recs, strict=True)}
    stage = _stages(idx, rala)["dense"]
    rows: dict = {}
    for parts, masks in itertools.product(QUERY_PARTS, ("drop", "keep")):
        if masks == "keep" and "r" not in QUERY_PARTS[parts]:
            continue
        qs = [dataclasses.replace(q, text=render_query(q.text, units[q.id], parts, masks)) for q in questions]
        label = parts + (" (masks kept)" if masks == "keep" else "")
        rows[label] = {"dense": _score(qs, Reranked(stage, None, args.n))}
        for fuse in args.fuse:
            rala.fuse = fuse
            rows[label][f"dense+rala fuse={fuse}"] = _score(qs, Reranked(stage, rala, args.n))
    return {"llm": args.llm, "fallbacks": sum(1 for r in recs if r["fallback"]),
            "unroll_seconds_mean": round(sum(r["seconds"] for r in recs) / len(recs), 2),
            "unroll_calls_mean": round(sum(r["calls"] for r in recs) / len(recs), 2), "queries": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("grid", "unrolled", "eq3"))
    parser.add_argument("--index", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--questions", default="0:250", help="slice START:END of the dataset's questions")
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--grid", nargs="+", default=list(LAYER_SETS), choices=list(LAYER_SETS))
    parser.add_argument("--cls", nargs="+", default=["mean", "cls"], choices=["mean", "cls"])
    parser.add_argument("--fuse", nargs="+", default=["none", "rrf"], choices=["none", "rrf"])
    parser.add_argument("--layers", default=None, help="RaLa layer set for 'unrolled' (default: the library's)")
    parser.add_argument("--llm", default="local")
    parser.add_argument("--unroll-cache", default="runs/cooprag/unroll.jsonl")
    parser.add_argument("--llm-cache", default=None, help="SQLite LLM response cache (share a QA run's to reuse its calls)")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from tandem.corpus import load_dataset
    from tandem.index import open_index
    from tandem.rerank.rala import open_rala

    ds = load_dataset(args.dataset)
    start, end = (int(x) for x in args.questions.split(":"))
    questions = ds.questions[start:end]
    idx = open_index(args.index)
    rala = open_rala(idx, **({"layers": LAYER_SETS[args.layers]} if args.layers else {}))
    rala._cache_size = 4 * len(questions)
    result = {"grid": grid, "unrolled": unrolled, "eq3": eq3}[args.mode](args, questions, idx, rala)
    print(json.dumps({"mode": args.mode, "dataset": args.dataset, "questions": args.questions, "index": args.index,
                      "n": args.n, "result": result}, indent=2))


if __name__ == "__main__":
    main()
