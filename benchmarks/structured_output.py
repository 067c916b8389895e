"""Throughput and protocol health: local backend vs a real vLLM server, schema vs prompt-only decoding.

For each (method, backend, json mode, concurrency) it runs the first N dev500 questions through the
real runner (no response cache) and prints one JSON object per configuration: seconds per question,
questions per minute, fallback_rate, parse_rate, schema_decoded_rate, EM/F1, errors.

    python benchmarks/structured_output.py --index indexes/dev500 --limit 32 \
        --methods naive_rag dualrag --llms local openai:smollm2@http://127.0.0.1:8011/v1 \
        --json-modes schema prompt --concurrency 1 16

Start the server with `tandem llm serve --port 8011` first. The local backend runs one generation at a
time, so it is measured at concurrency 1 only.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from tandem.compose import build_method
from tandem.corpus import load_dataset
from tandem.eval.runner import run_qa
from tandem.index import open_index
from tandem.llm import load_llm
from tandem.methods import Search
from tandem.retrieve import open_retriever

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa" / "dev500.jsonl"


def one_run(method: str, spec: str, json_mode: str, concurrency: int, questions: list, search: Search) -> dict:
    backend_opts = {"json_mode": json_mode} | ({"max_concurrency": max(16, concurrency)} if spec.startswith("openai") else {})
    llm = load_llm(spec, **backend_opts)
    runner = build_method(method, llm, search)
    config = {"method": method, "dataset": str(DATA), "llm": spec, "llm_opts": backend_opts, "hyper": {}}
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        metrics = run_qa(runner, questions, Path(out), config, concurrency=concurrency)
        elapsed = time.perf_counter() - start
    keys = ("em", "f1", "errors", "fallback_rate", "parse_rate", "schema_decoded_rate", "structured_calls", "llm_calls_per_q")
    return {"method": method, "llm": spec.split("@")[0], "json_mode": json_mode, "concurrency": concurrency,
            "questions": len(questions), "seconds": round(elapsed, 1),
            "seconds_per_question": round(elapsed / len(questions), 2),
            "questions_per_minute": round(60 * len(questions) / elapsed, 2),
            **{k: metrics[k] for k in keys if k in metrics}, "protocol": metrics.get("protocol")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=Path, required=True, help="index over the dev500 pool")
    parser.add_argument("--dataset", type=Path, default=DATA)
    parser.add_argument("--limit", type=int, default=32)
    parser.add_argument("--methods", nargs="+", default=["naive_rag", "dualrag"])
    parser.add_argument("--llms", nargs="+", default=["local"])
    parser.add_argument("--json-modes", nargs="+", default=["schema", "prompt"])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    args = parser.parse_args()
    questions = load_dataset(args.dataset).questions[: args.limit]
    index = open_index(args.index)
    search = Search(open_retriever(index), index.store)
    for method in args.methods:
        for spec in args.llms:
            levels = args.concurrency if spec.startswith("openai") else [1]
            for mode in args.json_modes:
                for concurrency in levels:
                    print(json.dumps(one_run(method, spec, mode, concurrency, questions, search)), flush=True)


if __name__ == "__main__":
    main()
