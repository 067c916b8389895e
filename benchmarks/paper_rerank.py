"""The paper preset's read (top-50 candidates -> reranker -> top-10) on dev500: does the rerank change the
order, and what does it do to gold-document recall? Prints JSON.

For each first stage (dense, bm25, hybrid) alone and under the MiniLM bi-encoder: recall@2/5/10 of the gold
passages; for the reranked ones the share of questions whose top-10 order differs from the first stage's own
top-10, and the share whose top-10 *set* differs from dense top-10. (A bi-encoder over its own dense stage
changes the order only by the int8 encoder's batch-dependent noise: the query is encoded in a batch by the
first stage and alone by the reranker.) Questions 250-499 choose the preset's first stage, 0-249 report it
(``--questions``).

    python benchmarks/paper_rerank.py --index runs/dev500-hybrid [--questions 0:250]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tandem.corpus import load_dataset
from tandem.eval.retrieval import evaluate_retrieval
from tandem.index import open_index
from tandem.methods.parts import build_reranker
from tandem.methods.settings import RerankSettings
from tandem.model_files import offline_env
from tandem.rerank.base import Reranked
from tandem.retrieve import open_retriever

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "hotpotqa" / "dev500.jsonl"


def top10(records: list[dict]) -> dict[str, list[str]]:
    return {r["id"]: [h["doc_id"] for h in r["hits"][:10]] for r in records}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--index", required=True, help="a hybrid index over dev500's pool")
    parser.add_argument("--questions", default="0:250", help="START:END of dev500's questions")
    parser.add_argument("--candidates", type=int, default=50)
    args = parser.parse_args()
    offline_env()
    start, end = (int(x) for x in args.questions.split(":"))
    questions = load_dataset(DATA).questions[start:end]
    index = open_index(args.index)
    reranker = build_reranker(RerankSettings(reranker="bi_encoder"), index.store, index)
    report: dict[str, object] = {"questions": args.questions, "candidates": args.candidates}
    dense_top: dict[str, list[str]] = {}
    for first in ("dense", "bm25", "hybrid"):
        first_top: dict[str, list[str]] = {}
        for rerank in (False, True):
            retriever = Reranked(open_retriever(index, first), reranker if rerank else None, args.candidates)
            t0 = time.perf_counter()
            records, metrics = evaluate_retrieval(questions, retriever, (2, 5, 10))
            tops = top10(records)
            dense_top, first_top = dense_top or tops, first_top or tops
            row = {k: round(v, 4) for k, v in metrics.items() if k.startswith("recall")}
            if rerank:
                row["order_differs_from_first_stage"] = round(sum(tops[q] != first_top[q] for q in tops) / len(tops), 3)
                row["set_differs_from_dense"] = round(sum(set(tops[q]) != set(dense_top[q]) for q in tops) / len(tops), 3)
            report[retriever.name] = {**row, "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
