"""Ask a run's recorded LLM calls again and count the replies that come back the same: is the engine's greedy
output reproducible when the calls that share the engine with it differ?

    python benchmarks/replay_calls.py RUN --llm local --llm-opt dtype=float32 --calls 16 --concurrency 1

RUN is a run folder with an ``llm-cache.sqlite`` (``tandem eval qa`` writes one). The first ``--calls``
greedy text calls recorded there (no first-token requests, in the order they were made, optionally only
those whose prompt holds ``--contains``) are sent to the LLM the options build, without the cache, at
``--concurrency`` in flight; a recorded call was made beside whatever else the run had in flight then.
Printed: per call, the same or not (JSON replies by content; a schema's keys in the recorded reply's order) and the first place the replies part; then the count of identical replies.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tandem.llm.backends import load_llm
from tandem.llm.base import LLMRequest
from tandem.llm.options import parse_pairs


def recorded(run: Path, calls: int, contains: str | None) -> list[tuple[LLMRequest, str]]:
    """The run's first ``calls`` greedy text calls (request, recorded reply), in the order they were made."""
    db = sqlite3.connect(f"file:{run / 'llm-cache.sqlite'}?mode=ro", uri=True)
    rows = db.execute("SELECT request, response FROM responses ORDER BY created").fetchall()
    out = []
    for request, response in rows:
        data = json.loads(request)
        if data.get("first_tokens") or data.get("temperature") or (contains and contains not in request):
            continue
        reply = json.loads(response)["text"]
        if data.get("json_schema"):
            data["json_schema"] = in_reply_order(data["json_schema"], reply)
        out.append((LLMRequest(**data), reply))
        if len(out) == calls:
            break
    return out


def in_reply_order(schema: dict, reply: str) -> dict:
    """``schema`` with its properties in the order the recorded reply wrote them: the cache keeps a request's
    keys sorted, and the engine's grammar writes an object's keys in its schema's order, so the order the call
    was made with is the reply's."""
    try:
        parsed = json.loads(reply)
    except ValueError:
        return schema
    if not isinstance(parsed, dict):
        return schema
    keys = list(parsed)
    props = schema.get("properties", {})
    order = [k for k in keys if k in props] + [k for k in props if k not in keys]
    return {**schema, "properties": {k: props[k] for k in order}}


def same(a: str, b: str) -> bool:
    """Equal replies; JSON replies by their content."""
    if a == b:
        return True
    try:
        return json.loads(a) == json.loads(b)
    except ValueError:
        return False


def parted_at(a: str, b: str) -> int:
    """The first character where ``a`` and ``b`` differ (the shorter length when one extends the other)."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    parser.add_argument("--llm", default="local")
    parser.add_argument("--llm-opt", action="append", default=[], help="KEY=VALUE, as tandem's --llm-opt")
    parser.add_argument("--calls", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--show", action="store_true", help="print both replies where they differ")
    parser.add_argument("--contains", help="only calls whose request holds this text (a role's heading)")
    args = parser.parse_args()
    opts = parse_pairs(args.llm_opt)  # values typed as tandem's --llm-opt types them
    calls = recorded(args.run, args.calls, args.contains)
    llm = load_llm(args.llm, **opts)
    start = time.perf_counter()
    with ThreadPoolExecutor(args.concurrency) as pool:
        replies = list(pool.map(lambda call: llm.complete(call[0]).text, calls))
    identical = 0
    for i, ((_, was), now) in enumerate(zip(calls, replies, strict=True)):
        alike = same(was, now)
        identical += alike
        where = "same" if alike else f"parts at char {parted_at(was, now)} of {len(was)}"
        print(f"call {i}: {where}")
        if not alike and args.show:
            print("  was:", was[:200])
            print("  now:", now[:200])
    print(json.dumps({"run": str(args.run), "calls": len(calls), "identical": identical, "concurrency": args.concurrency,
                      "llm": args.llm, "opts": opts, "seconds": round(time.perf_counter() - start, 1)}))


if __name__ == "__main__":
    main()
