"""Runner concurrency against an OpenAI-compatible server with a fixed latency (a local fake one).

Runs the same questions at concurrency 1 and 16 through the real runner and openai backend and
prints JSON: seconds for each, the speed-up, and the server's largest number of requests in flight.

    python benchmarks/qa_concurrency.py [--questions 64] [--latency 0.25] [--method direct]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from tandem.compose import build_method
from tandem.eval.runner import run_qa
from tandem.llm import OpenAILLM
from tandem.testing.fake_server import FakeOpenAIServer
from tandem.types import Question


def timed_run(base_url: str, questions: list[Question], concurrency: int, method: str) -> float:
    llm = OpenAILLM("fake-model", base_url, max_concurrency=max(16, concurrency))
    config = {"method": method, "dataset": "synthetic", "llm": "openai:fake-model", "hyper": {}}
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        metrics = run_qa(build_method(method, llm), questions, Path(out), config, concurrency=concurrency)
        elapsed = time.perf_counter() - start
    assert metrics["errors"] == 0, metrics
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.25, help="server seconds per request")
    parser.add_argument("--method", default="direct")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    args = parser.parse_args()
    questions = [Question(f"q{i}", f"Question number {i}?", ("x",)) for i in range(args.questions)]
    result: dict[str, object] = {"questions": args.questions, "server_latency_s": args.latency, "method": args.method}
    with FakeOpenAIServer(answer="x", latency_s=args.latency) as server:
        for c in args.concurrency:
            server.max_in_flight = 0
            result[f"seconds_c{c}"] = round(timed_run(server.base_url, questions, c, args.method), 3)
            result[f"max_in_flight_c{c}"] = server.max_in_flight
    lo, hi = min(args.concurrency), max(args.concurrency)
    result[f"speedup_c{hi}_vs_c{lo}"] = round(result[f"seconds_c{lo}"] / result[f"seconds_c{hi}"], 2)  # type: ignore[operator]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
