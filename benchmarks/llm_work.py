"""What an evaluation run asked of the LLM, and the least work any engine with a prefix cache must do for it.

    python benchmarks/llm_work.py RUN [RUN ...]          # RUN: a ``tandem eval qa`` output folder
    python benchmarks/llm_work.py RUN --block 16         # prefix-cache blocks of 16 tokens instead of 32

For every LLM call in the run's traces (questions in file order, calls in trace order) it rebuilds the
prompt's token ids with the local model's chat template and counts the tokens a prefix cache of
unbounded size must still prefill: the prompt less its longest prefix, in whole blocks, already seen in an
earlier call (how OpenVINO's and vLLM's prefix caches match: block by block, each block's key the
tokens before it and its own). Printed per role and in all: calls, prompt tokens, tokens to prefill,
completion tokens and the calls' summed latency. The calls' latencies are then fitted as
``a * prefilled + b * decoded + c`` (least squares; meaningful for a concurrency-1 run, where a call's
latency is its own work): seconds per prefilled and per decoded token, and what each part took.

With a machine's prefill and decode rates (``benchmarks/llm_engine.py``), the two counts give the floor
of a run's seconds: no engine that keeps the model's arithmetic can do less work than this.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

DEFAULT_BLOCK = 32  # the OpenVINO CPU plugin's KV block size


def to_prefill(prompts: Iterable[Sequence[int]], block: int = DEFAULT_BLOCK) -> Iterator[int]:
    """For each prompt in order, the tokens left to prefill after the longest prefix, in whole blocks,
    that an earlier prompt shares (a prefix cache that never evicts)."""
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    seen: set[int] = set()
    for ids in prompts:
        key, cached, hit = 0, 0, True
        for start in range(0, len(ids) - len(ids) % block, block):
            key = hash((key, tuple(ids[start:start + block])))
            if hit and key in seen:
                cached = start + block
            else:
                hit = False
                seen.add(key)
        yield len(ids) - cached


def calls_of(run: Path) -> list[dict[str, Any]]:
    """The LLM calls of a run's ``predictions.jsonl`` traces, in file and trace order."""
    path = run / "predictions.jsonl"
    if not path.is_file():
        raise SystemExit(f"{run}: no predictions.jsonl (is it a `tandem eval qa` output folder?)")
    calls = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SystemExit(f"{path}:{number}: not JSON ({exc})") from exc
        for step in (record.get("trace") or {}).get("steps", []):
            calls.extend(c for c in step.get("llm_calls", []) if c.get("messages"))
    return calls


def fit(rows: list[tuple[int, int, float]]) -> dict[str, float] | None:
    """Least squares of latency on (prefilled, decoded, 1); None with too few calls to fit."""
    import numpy as np

    if len(rows) < 4:
        return None
    a = np.array([[p, d, 1.0] for p, d, _ in rows])
    y = np.array([s for _, _, s in rows])
    (per_prefill, per_decode, const), *_ = np.linalg.lstsq(a, y, rcond=None)
    return {"s_per_prefilled_token": float(per_prefill), "s_per_decoded_token": float(per_decode),
            "s_per_call": float(const), "prefill_s": float(per_prefill * a[:, 0].sum()),
            "decode_s": float(per_decode * a[:, 1].sum())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--block", type=int, default=DEFAULT_BLOCK, help="prefix-cache block size in tokens")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from tandem.llm.base import Message
    from tandem.llm.hf import chat_token_ids
    from tandem.llm.local import ensure_converted

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_converted()))
    for run in args.runs:
        calls = calls_of(run)
        prompts = [chat_token_ids(tokenizer, [Message(**m) for m in c["messages"]]) for c in calls]
        roles: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0, 0, 0.0])
        rows = []
        for call, ids, new in zip(calls, prompts, to_prefill(prompts, args.block), strict=True):
            decoded = int(call.get("completion_tokens") or 0)
            latency = float(call.get("latency_s") or 0.0)
            for key in (call.get("role") or "?", "all"):
                totals = roles[key]
                totals[0] += 1
                totals[1] += len(ids)
                totals[2] += new
                totals[3] += decoded
                totals[4] += latency
            rows.append((new, decoded, latency))
        print(f"\n{run} (block {args.block})\n")
        print("| role | calls | prompt tokens | to prefill | completion tokens | latency s |")
        print("| --- | --- | --- | --- | --- | --- |")
        for role, (n, prompt, new, decoded, latency) in sorted(roles.items(), key=lambda kv: kv[0] == "all"):
            print(f"| {role} | {n} | {prompt} | {new} | {decoded} | {latency:.1f} |")
        rates = fit(rows)
        if rates:
            print(json.dumps({"run": str(run), **{k: round(v, 5) for k, v in rates.items()}}))


if __name__ == "__main__":
    main()
