"""Prefill and decode tokens/s of the local engine with N threads (two short measurements each).

    python benchmarks/llm_threads.py 1 && python benchmarks/llm_threads.py 2

A ~600-token prompt (fresh prefix: no cache hit) and 64 decoded tokens; prints the load average too,
since on a busy machine the best thread count is not the number of cores (docs/openvino.md, Threads).
"""

from __future__ import annotations

import argparse
import os
import time

from tandem.llm import LLMRequest, load_llm

PASSAGE = "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. " * 25


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("threads", type=int)
    parser.add_argument("--engine", default="openvino")
    args = parser.parse_args()
    llm = load_llm("local", engine=args.engine, num_threads=args.threads)
    llm.complete(LLMRequest.from_prompt("Hello", max_tokens=4))
    pairs = []
    for _ in range(2):
        r = llm.complete(LLMRequest.from_prompt(f"{time.time_ns()} {PASSAGE}Who?", max_tokens=1))
        g = llm.complete(LLMRequest.from_prompt(f"Write a long story about dragon {time.time_ns()}.", max_tokens=64))
        pairs.append((round(r.prompt_tokens / r.latency_s), round(g.completion_tokens / g.latency_s, 1)))
    print(f"threads {args.threads}: prefill/decode tok/s {pairs}, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
