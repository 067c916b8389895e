"""Measure the LLM layer on this machine; prints one JSON object (no assertions).

    python benchmarks/llm_client.py local      # load time, prompt and generation tok/s
    python benchmarks/llm_client.py openai     # client throughput against the fake server

Figures are medians over ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tandem.llm.base import LLMRequest

PASSAGE = (
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is "
    "named after the engineer Gustave Eiffel, whose company designed and built the tower from 1887 "
    "to 1889. Locally nicknamed La dame de fer, it was constructed as the centrepiece of the 1889 "
    "World's Fair, and to crown the centennial anniversary of the French Revolution. "
)


def bench_local(repeat: int, num_threads: int | None) -> dict[str, Any]:
    """Load time (warm cache), prefill tok/s on a ~500-token prompt, decode tok/s over 128 tokens."""
    from tandem.llm.local import load_local

    start = time.perf_counter()
    llm = load_local(num_threads=num_threads)
    load_s = time.perf_counter() - start
    long_prompt = LLMRequest.from_prompt(PASSAGE * 7 + "\nWho designed the tower?", max_tokens=1)
    story = LLMRequest.from_prompt("Write a long story about a dragon and a knight.", max_tokens=128)
    llm.complete(LLMRequest.from_prompt("Hello", max_tokens=4))  # warm-up
    prefill, decode, first = [], [], None
    for _ in range(repeat):
        r = llm.complete(long_prompt)
        prefill.append(r.prompt_tokens / r.latency_s)
        first = r
        g = llm.complete(story)
        short_prompt_s = g.prompt_tokens / prefill[-1]
        decode.append(g.completion_tokens / max(1e-9, g.latency_s - short_prompt_s))
    return {
        "backend": "local",
        "model": llm.name,
        "threads": llm.threads,
        "load_s_warm_cache": round(load_s, 2),
        "prompt_tokens": first.prompt_tokens if first else 0,
        "prompt_tok_per_s": round(statistics.median(prefill), 1),
        "generation_tokens": g.completion_tokens,
        "generation_tok_per_s": round(statistics.median(decode), 1),
    }


def bench_openai(requests: int, concurrency: int, latency_s: float) -> dict[str, Any]:
    """Requests/s of :class:`OpenAILLM` against the fake server with a fixed per-request latency."""
    from tandem.llm.openai_compat import OpenAILLM
    from tandem.testing.fake_server import FakeOpenAIServer

    with FakeOpenAIServer(answer="Paris", latency_s=latency_s) as srv:
        llm = OpenAILLM("fake-model", srv.base_url, max_concurrency=concurrency)
        reqs = [LLMRequest.from_prompt(f"question {i}", max_tokens=8) for i in range(requests)]
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency * 2) as pool:
            list(pool.map(llm.complete, reqs))
        wall = time.perf_counter() - start
        llm.close()
        return {
            "backend": "openai (fake server)",
            "requests": requests,
            "max_concurrency": concurrency,
            "server_latency_s": latency_s,
            "wall_s": round(wall, 3),
            "requests_per_s": round(requests / wall, 1),
            "ideal_requests_per_s": round(concurrency / latency_s, 1) if latency_s else None,
            "server_max_in_flight": srv.max_in_flight,
        }


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["local", "openai"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.05)
    args = parser.parse_args(argv)
    if args.what == "local":
        result = bench_local(args.repeat, args.threads)
    else:
        result = bench_openai(args.requests, args.concurrency, args.latency)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
