"""How long the local engine keeps the process's other Python threads waiting, per ``step_tokens``.

    python benchmarks/llm_step.py RUN                           # RUN: a `tandem eval qa --method dualrag` folder
    python benchmarks/llm_step.py RUN --role summarizer --calls 3 --step-tokens 2048 512 256

openvino-genai's ``step()`` holds the GIL while the model runs. For each ``step_tokens`` value this loads
the local engine with it, sends the first ``--calls`` prompts of ``--role`` from the run's traces one at a
time (a single token generated: the time is prefill), and meanwhile runs a thread that wakes every
millisecond: the longest gap between its wake-ups is how long any other thread of the process (a
server's request handlers, the eval runner's question threads) can be kept waiting. Printed per value:
prompt tokens, seconds, prompt tokens/s and the longest gap. ``uptime`` first and last.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llm_engine import uptime  # noqa: E402
from llm_work import calls_of  # noqa: E402


def longest_gap_while(work: Callable[[], None]) -> tuple[float, float]:
    """(seconds ``work()`` took, the longest gap between a 1 ms ticker thread's wake-ups meanwhile)."""
    gaps = [0.0]
    done = threading.Event()

    def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            gaps[0] = max(gaps[0], now - last)
            last = now

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    start = time.perf_counter()
    work()
    seconds = time.perf_counter() - start
    done.set()
    ticker.join()
    return seconds, gaps[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    parser.add_argument("--role", default="summarizer")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--step-tokens", type=int, nargs="+", default=[2048, 512, 256])
    args = parser.parse_args()

    from tandem.errors import ConfigError
    from tandem.llm.base import LLMRequest, Message
    from tandem.llm.local import load_local

    calls = [c for c in calls_of(args.run) if c.get("role") == args.role]
    if not calls:
        raise SystemExit(f"{args.run}: no {args.role!r} calls in its traces")
    requests = [LLMRequest(messages=[Message(**m) for m in c["messages"]], max_tokens=1, temperature=0)
                for c in calls[:args.calls]]
    print(json.dumps({"uptime_start": uptime()}))
    for step_tokens in args.step_tokens:
        try:
            llm = load_local(step_tokens=step_tokens)
        except ConfigError as exc:
            raise SystemExit(f"--step-tokens {step_tokens}: {exc}") from exc
        prompt_tokens = [0]

        def send(llm=llm, prompt_tokens=prompt_tokens) -> None:
            for req in requests:
                prompt_tokens[0] += llm.complete(req).prompt_tokens

        seconds, gap = longest_gap_while(send)
        llm.close()
        print(json.dumps({"step_tokens": step_tokens, "prompt_tokens": prompt_tokens[0], "s": round(seconds, 2),
                          "prompt_tok_s": round(prompt_tokens[0] / seconds, 1), "longest_wait_s": round(gap, 2)}),
              flush=True)
    print(json.dumps({"uptime_end": uptime()}))


if __name__ == "__main__":
    main()
