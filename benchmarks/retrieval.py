"""Retrieval figures on real data: recall@2/5/10, MRR, nDCG@10 and single-query latency p50/p95
for bm25 / dense / hybrid, plus index build time and peak RSS. Prints JSON.

    python benchmarks/retrieval.py [--datasets hotpotqa musique] [--work DIR] [--queries 200]
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

from tandem.corpus import load_dataset
from tandem.eval.retrieval import evaluate_retrieval, latency_ms
from tandem.index import build_index, open_index
from tandem.index.encoder import load_encoder
from tandem.model_files import offline_env
from tandem.retrieve import open_retriever

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DATASETS = {"hotpotqa": SHARED / "hotpotqa/dev500.jsonl", "musique": SHARED / "musique/hipporag_100.json"}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--work", default="runs/bench-retrieval")
    parser.add_argument("--queries", type=int, default=200, help="queries timed for latency")
    parser.add_argument("--backend", default=None, help="encoder backend (default: the fastest)")
    args = parser.parse_args()
    offline_env()
    report: dict[str, object] = {}
    for name in args.datasets:
        ds = load_dataset(DATASETS[name])
        folder = Path(args.work) / name
        encoder = load_encoder("minilm", **({"backend": args.backend} if args.backend else {}))
        start = time.perf_counter()
        build_index(ds.passages, folder, kind="hybrid", encoder=encoder)
        build_s = time.perf_counter() - start
        idx = open_index(folder, corpus=ds.passages, encoder=encoder)
        entry: dict[str, object] = {"passages": len(ds.passages), "questions": len(ds.questions),
                                    "build_s": round(build_s, 1), "encoder_backend": getattr(encoder, "backend", "st")}
        for kind in ("bm25", "dense", "hybrid"):
            retriever = open_retriever(idx, kind)
            _, metrics = evaluate_retrieval(ds.questions, retriever, (2, 5, 10))
            entry[kind] = {k: round(v, 4) for k, v in metrics.items() if isinstance(v, float)}
            entry[kind].update(latency_ms(retriever, [q.text for q in ds.questions[: args.queries]]))
        report[name] = entry
    report["peak_rss_mb"] = round(peak_rss_mb(), 1)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
