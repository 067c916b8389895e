"""What each way in costs per search: the same top-5 over a BM25 index of the dev500 pool (4,858
passages; with ``--retriever graph`` the passage graph too) for the first N dev500 questions, one at a
time, through tandem's retriever directly, the LangChain and LlamaIndex retrievers (over the folder and
over ``tandem serve``'s /v1/retrieve on loopback), and the MCP ``search`` tool (official SDK client;
``tandem mcp`` over stdio as a child process, and over streamable HTTP). Prints one JSON line per path:
median and p95 milliseconds per call, and whether every call returned the direct retriever's ids.

    python benchmarks/integrations_latency.py --questions 100
    python benchmarks/integrations_latency.py --questions 100 --retriever graph
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "hotpotqa" / "dev500.jsonl"
K = 5


def figures(name: str, latencies: list[float], same: bool) -> dict:
    ms = sorted(x * 1000 for x in latencies)
    return {"path": name, "calls": len(ms), "median_ms": round(statistics.median(ms), 2),
            "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 2), "same_ids_as_direct": same}


def timed(queries: list[str], search: Callable[[str], list[str]], expected: list[list[str]]) -> tuple[list[float], bool]:
    search(queries[0])  # warm-up (first-call imports and caches)
    latencies, same = [], True
    for query, ids in zip(queries, expected, strict=True):
        start = time.perf_counter()
        got = search(query)
        latencies.append(time.perf_counter() - start)
        same &= got == ids
    return latencies, same


async def timed_mcp(client, queries: list[str], retriever: str, expected: list[list[str]]) -> tuple[list[float], bool]:
    args = {"k": K, "retriever": retriever}
    await client.call_tool("search", {"query": queries[0], **args})
    latencies, same = [], True
    for query, ids in zip(queries, expected, strict=True):
        start = time.perf_counter()
        result = await client.call_tool("search", {"query": query, **args})
        latencies.append(time.perf_counter() - start)
        same &= [p["id"] for p in result.structured_content["passages"]] == ids
    return latencies, same


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--retriever", default="bm25", choices=["bm25", "graph"])
    args = ap.parse_args()

    from mcp import Client, StdioServerParameters

    from tandem.corpus import load_dataset
    from tandem.index import build_index, open_index
    from tandem.index.passage_graph import GraphExtra
    from tandem.integrations.langchain import TandemRetriever as LangChainRetriever
    from tandem.integrations.llamaindex import TandemRetriever as LlamaIndexRetriever
    from tandem.retrieve import open_retriever
    from tandem.server.app import create_app
    from tandem.server.engine import Engine
    from tandem.testing.fake_llm import FakeLLM
    from tandem.testing.serving import free_port, serving

    ds = load_dataset(DATA)
    queries = [q.text for q in ds.questions[:args.questions]]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "dev500"
        build_index(ds.passages, folder, kind="bm25", extras=[GraphExtra()] if args.retriever == "graph" else [])
        direct = open_retriever(open_index(folder), args.retriever)
        expected = [[h.doc_id for h in direct.search(q, K)] for q in queries]
        rows = [figures("direct retriever", *timed(queries, lambda q: [h.doc_id for h in direct.search(q, K)], expected))]
        engine = Engine({"dev500": folder}, FakeLLM(default="unused"), method="naive_rag")
        with serving(create_app(engine)) as url:
            for where, source in (("folder", str(folder)), ("tandem serve", url)):
                lc = LangChainRetriever(source=source, retriever=args.retriever, k=K)
                li = LlamaIndexRetriever(source, retriever=args.retriever, k=K)
                rows.append(figures(f"langchain over {where}", *timed(queries, lambda q, r=lc: [d.id for d in r.invoke(q)], expected)))
                rows.append(figures(f"llamaindex over {where}", *timed(
                    queries, lambda q, r=li: [n.node.node_id for n in r.retrieve(q)], expected)))
        engine.close()
        command = [sys.executable, "-m", "tandem.cli", "mcp", "--index", f"dev500={folder}", "--llm", "fake"]

        async def over_mcp() -> None:
            async with Client(StdioServerParameters(command=command[0], args=command[1:])) as client:
                rows.append(figures("mcp stdio", *await timed_mcp(client, queries, args.retriever, expected)))
            port = free_port()
            proc = subprocess.Popen([*command, "--transport", "http", "--port", str(port)], stderr=subprocess.DEVNULL)
            try:
                while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
                    assert proc.poll() is None, "tandem mcp --transport http exited"
                    await asyncio.sleep(0.2)
                async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                    rows.append(figures("mcp streamable http", *await timed_mcp(client, queries, args.retriever, expected)))
            finally:
                proc.terminate()
                proc.wait(20)

        asyncio.run(over_mcp())
    for row in rows:
        print(json.dumps({"retriever": args.retriever, **row}))


if __name__ == "__main__":
    main()
