"""Load on `tandem serve` over loopback: N POST /v1/ask requests at a given concurrency against a real
uvicorn server (in this process, on a free port) over the demo corpus; prints one JSON object per run:
requests, non-2xx count by status, p50/p95/p99 latency, requests per second.

    python benchmarks/serve_load.py --llm fake --requests 1000 --concurrency 32          # the API itself
    python benchmarks/serve_load.py --llm local --requests 24 --concurrency 16 \\
        --workers 1 --max-queue 4                                                      # a full queue

With the fake LLM the figures are the server's own overhead; with `--llm local` (the embedded
SmolLM2) and a small `--max-queue`, the requests beyond the queue get 429 with Retry-After at once.

Other clients while the LLM works (docs/openvino.md, "The engine's process"): `--probe` also sends
GET /healthz and POST /v1/retrieve one after the other, 50 ms apart, for as long as the asks run, and
prints their latencies (what a page's or another user's cheap request waits):

    python benchmarks/serve_load.py --llm local --method dualrag --requests 2 --concurrency 1 --probe

A soak (docs/reliability.md): `--rss-after 50` also measures the process's resident memory after the
first 50 requests and after all of them, and counts 5xx replies:

    python benchmarks/serve_load.py --llm local --requests 300 --concurrency 8 --rss-after 50
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import uvicorn

from tandem.corpus import load_corpus
from tandem.index import build_index
from tandem.server.app import create_app
from tandem.server.engine import Engine
from tandem.testing.fake_llm import FakeLLM

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ["Where was Marie Curie born?", "Which element did the Curies name after Poland?",
             "Who did Marie Curie marry?", "Which river flows through Warsaw?"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def load(url: str, n: int, concurrency: int) -> tuple[list[float], Counter, float]:
    latencies: list[float] = []
    statuses: Counter = Counter()
    sem = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:

        async def one(i: int) -> None:
            async with sem:
                start = time.perf_counter()
                resp = await client.post("/v1/ask", json={"question": QUESTIONS[i % len(QUESTIONS)]})
                latencies.append(time.perf_counter() - start)
                statuses[resp.status_code] += 1
                if len(latencies) % 25 == 0:  # a long soak says how far it is
                    print(f"{len(latencies)}/{n} requests, {dict(statuses)}", file=sys.stderr, flush=True)

        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        return latencies, statuses, time.perf_counter() - start


async def probed(url: str, n: int, concurrency: int) -> tuple[list[float], Counter, float, dict[str, list[float]]]:
    """:func:`load`, with /healthz and /v1/retrieve timed one after the other, 50 ms apart, until it ends."""
    waits: dict[str, list[float]] = {"healthz": [], "retrieve": []}
    done = asyncio.Event()

    async def probe() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=600) as client:
            while not done.is_set():
                for name, call in (("healthz", lambda: client.get("/healthz")),
                                   ("retrieve", lambda: client.post("/v1/retrieve", json={"query": "polonium", "k": 3}))):
                    start = time.perf_counter()
                    (await call()).raise_for_status()
                    waits[name].append(time.perf_counter() - start)
                await asyncio.sleep(0.05)

    async def loaded() -> tuple[list[float], Counter, float]:
        try:
            return await load(url, n, concurrency)
        finally:
            done.set()

    (latencies, statuses, wall), _ = await asyncio.gather(loaded(), probe())
    return latencies, statuses, wall, waits


def rss_mb() -> float:
    """This process's resident memory (the server runs in it), in MB."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def pct(values: list[float], q: float) -> float:
    return round(statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1], 4) if len(values) > 1 else round(values[0], 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llm", default="fake", help="fake (instant scripted answers) or an LLM spec, e.g. local")
    ap.add_argument("--method", default="naive_rag")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--max-queue", type=int, default=64)
    ap.add_argument("--probe", action="store_true", help="Time /healthz and /v1/retrieve while the asks run")
    ap.add_argument("--rss-after", type=int, default=0, help="Soak: resident memory after this many requests and after all")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        build_index(load_corpus(ROOT / "examples" / "demo_corpus"), Path(tmp) / "demo", kind="bm25")
        llm = FakeLLM(default="Warsaw") if args.llm == "fake" else args.llm
        engine = Engine({"demo": Path(tmp) / "demo"}, llm, method=args.method, workers=args.workers,
                        max_queue=args.max_queue)
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(create_app(engine), host="127.0.0.1", port=port, log_level="error"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        url, first = f"http://127.0.0.1:{port}", min(args.rss_after or args.requests, args.requests)
        waits: dict[str, list[float]] = {}
        try:
            if args.probe:
                latencies, statuses, wall, waits = asyncio.run(probed(url, first, args.concurrency))
            else:
                latencies, statuses, wall = asyncio.run(load(url, first, args.concurrency))
            rss_first = rss_mb()
            if first < args.requests:
                more, more_statuses, more_wall = asyncio.run(load(url, args.requests - first, args.concurrency))
                latencies, wall = latencies + more, wall + more_wall
                statuses.update(more_statuses)
        finally:
            rss_after = rss_mb()
            server.should_exit = True
            thread.join(10)
            engine.close()
    print(json.dumps({
        "llm": args.llm, "method": args.method, "requests": args.requests, "concurrency": args.concurrency,
        "workers": args.workers, "max_queue": args.max_queue,
        "status": dict(sorted(statuses.items())), "non_2xx": sum(v for k, v in statuses.items() if not 200 <= k < 300),
        "latency_s": {"p50": pct(latencies, 50), "p95": pct(latencies, 95), "p99": pct(latencies, 99),
                      "max": round(max(latencies), 4)},
        "requests_per_s": round(args.requests / wall, 1), "wall_s": round(wall, 2),
        "5xx": sum(v for k, v in statuses.items() if k >= 500),
        **({"probe_s": {name: {"n": len(v), "p50": pct(v, 50), "p95": pct(v, 95), "max": round(max(v), 4)}
                        for name, v in waits.items() if v}} if waits else {}),
        **({"rss_mb": {f"after_{first}": rss_first, f"after_{args.requests}": rss_after,
                       "ratio": round(rss_after / rss_first, 3)}} if args.rss_after else {}),
    }))


if __name__ == "__main__":
    main()
