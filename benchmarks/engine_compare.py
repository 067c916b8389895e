"""Prefill and decode speed of one GGUF on two in-process engines: OpenVINO GenAI (``local``) and llama.cpp
(``llamacpp``, optional: ``pip install 'tandem[llamacpp]'``), in alternating rounds on the same prompts.

    python benchmarks/engine_compare.py --model qwen2.5-coder-1.5b --rounds 4

Each call sends a NativeRAG-style prompt of five dev500 passages (a different passage order and a leading
request number each call, so no prefix cache helps past the chat template's opening). Prefill: a call with
``max_tokens=1``; decode: (64-token call - prefill call) over the 63 tokens after the first. Prints one
JSON line a measurement (with the load average) and a table of medians; docs/models.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

from tandem.llm import LLMRequest, load_llm
from tandem.llm.ladder import gguf_path
from tandem.llm.options import parse_pairs

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa" / "dev500.jsonl"


def passages(row: dict) -> list[dict]:
    """The question's supporting passages, then its longest others: five in all."""
    ctx = row["contexts"]
    others = sorted((c for c in ctx if not c["is_supporting"]), key=lambda c: -len(c["paragraph_text"]))
    return ([c for c in ctx if c["is_supporting"]] + others)[:5]


def prompt(row: dict, k: int) -> str:
    """Request ``k``: the five passages rotated by ``k`` (reversed on odd k), the question, a long-answer ask."""
    five = passages(row)
    order = [(k + j) % 5 if k % 2 == 0 else (k - j) % 5 for j in range(5)]
    docs = "\n".join(f"[{n}] {five[i]['title']}: {five[i]['paragraph_text']}" for n, i in enumerate(order, 1))
    return (f"Request {k}. Use these documents to answer.\n{docs}\n\nQuestion: {row['question_text']}\n"
            "Explain step by step which documents matter and why, then give the answer.\nAnswer:")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b", help="a ladder name (installed)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-batch", type=int, nargs="*", default=[512, 256],
                        help="llama.cpp batch sizes to try (none: llama.cpp is left out)")
    parser.add_argument("--ov-variant", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                        help="one more OpenVINO engine with these local options (JSON values), e.g. "
                             "dynamic_quantization=32; repeatable")
    parser.add_argument("--question", type=int, default=20, help="the dev500 question whose passages are read")
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.data.open(encoding="utf-8")]
    row = rows[args.question]
    engines = {"openvino": load_llm(f"local:{args.model}", num_threads=args.threads)}
    for variant in args.ov_variant:
        options = parse_pairs(variant.split(","), "--ov-variant")  # typed as --llm-opt's values
        engines[f"openvino {variant}"] = load_llm(f"local:{args.model}", num_threads=args.threads, **options)
    path = str(gguf_path(args.model))
    for nb in args.n_batch:
        engines[f"llamacpp n_batch={nb}"] = load_llm(f"llamacpp:{path}", n_threads=args.threads, n_batch=nb)

    def call(llm, k: int, max_tokens: int):
        return llm.complete(LLMRequest.from_prompt(prompt(row, k), max_tokens=max_tokens, temperature=0.0))

    for llm in engines.values():  # warm-up, not counted
        call(llm, 90, 2)
    rates: dict[str, dict[str, list[float]]] = {name: {"prefill": [], "decode": []} for name in engines}
    for r in range(args.rounds):
        for name in (list(engines) if r % 2 == 0 else list(engines)[::-1]):
            one, many = call(engines[name], 2 * r, 1), call(engines[name], 2 * r + 1, 64)
            prefill = (one.prompt_tokens - one.reused_tokens) / one.latency_s
            decode = ((many.completion_tokens - 1) / max(many.latency_s - one.latency_s, 1e-9)
                      if many.completion_tokens >= 16 else None)  # a reply that stopped early times no decode
            rates[name]["prefill"].append(prefill)
            if decode is not None:
                rates[name]["decode"].append(decode)
            print(json.dumps({"round": r, "engine": name, "prompt_tokens": one.prompt_tokens, "prefill_tps": prefill,
                              "completion_tokens": many.completion_tokens, "decode_tps": decode,
                              "load": os.getloadavg()}), flush=True)
    print("\n| engine | prefill tok/s (median) | decode tok/s (median) |\n| --- | --- | --- |")
    for name, r in rates.items():
        decode = f"{statistics.median(r['decode']):.2f}" if r["decode"] else "- (replies stopped early)"
        print(f"| {name} | {statistics.median(r['prefill']):.1f} | {decode} |")


if __name__ == "__main__":
    main()
