"""Greedy replies of the openvino engine's settings against the torch fp32 path, on RAG prompts (tuning set).

    python benchmarks/llm_answer_match.py 30 "" kv_cache=bfloat16 "dtype=float32,kv_cache=float32" dtype=float32

Each prompt is a dev500 question with its first five passages (questions ``--offset`` onwards, 100 by
default: the first 50 are the held-out set of ``llm_engine.py --same-answers 50``), 24 tokens, greedy,
one at a time, 1 thread. A variant is comma-separated engine options ("" = the engine's defaults).
Printed per variant: identical replies / prompts, seconds, and the replies that differ. The torch
replies are kept in ``runs/llm-answer-match-torch-OFFSET-N.json`` and reused.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT.parent / "shared" / "data" / "hotpotqa" / "dev500.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("questions", type=int)
    parser.add_argument("variants", nargs="*", help='engine options, e.g. "dtype=float32,kv_cache=float32"')
    parser.add_argument("--offset", type=int, default=100)
    args = parser.parse_args()

    from tandem.llm import LLMRequest, load_llm
    from tandem.llm.base import LLM
    from tandem.llm.options import parse_pairs

    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(), flush=True)
    rows = [json.loads(line) for line in DATASET.read_text().splitlines()][args.offset:args.offset + args.questions]

    def request(row: dict[str, Any]) -> LLMRequest:
        passages = "\n\n".join(f"{c['title']}: {c['paragraph_text']}" for c in row["contexts"][:5])
        return LLMRequest.from_prompt(f"Answer the question using the passages.\n\n{passages}\n\n"
                                      f"Question: {row['question_text']}\nAnswer briefly:", max_tokens=24)

    reqs = [request(r) for r in rows]

    def replies(llm: LLM) -> tuple[list[str], float]:
        start = time.perf_counter()
        return [llm.complete(q).text for q in reqs], time.perf_counter() - start

    cache = ROOT / "runs" / f"llm-answer-match-torch-{args.offset}-{args.questions}.json"
    if cache.is_file():
        base = json.loads(cache.read_text())
    else:
        base, seconds = replies(load_llm("local", engine="torch", num_threads=1))
        print(f"torch {seconds:.1f}s", flush=True)
        cache.parent.mkdir(exist_ok=True)
        cache.write_text(json.dumps(base))
    for variant in args.variants:
        opts = parse_pairs(variant.split(","), "a variant") if variant else {}  # typed as --llm-opt's values
        llm = load_llm("local", engine="openvino", num_threads=1, **opts)
        out, seconds = replies(llm)
        llm.close()
        same = sum(a == b for a, b in zip(base, out, strict=True))
        print(f"{variant or 'default'}: {same}/{len(reqs)} identical, {seconds:.1f}s", flush=True)
        for a, b in zip(base, out, strict=True):
            if a != b:
                print(f"    {a[:50]!r} | {b[:50]!r}", flush=True)
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
