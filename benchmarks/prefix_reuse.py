"""Prefix reuse: how much of a run's prompts the engine's prefix cache served, and the cache's block size.

    python benchmarks/prefix_reuse.py RUN [RUN ...]     # per role: prompt tokens, reused, share; DualRAG's
                                                        # Summarizer documents read and re-read
    python benchmarks/prefix_reuse.py --blocks [--llm local:smollm2]

``RUN``: an ``eval qa`` folder (predictions.jsonl). ``--blocks`` sends a 1,024-token prompt of random ids
to the OpenVINO pipeline, then prompts that share its first 512 ... 1,016 tokens, and prints each one's
seconds: the time stays flat between two block boundaries, which shows the block size the ledger assumes
(:mod:`tandem.llm.prefix_ledger`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import time
from pathlib import Path

from tandem.eval.runner import prefix_reuse


def run_figures(run: Path) -> dict:
    """Per-role reuse over a run's answered questions, and the Summarizer's document slots (DualRAG)."""
    rows = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "error" not in r]
    reuse = prefix_reuse([r.get("reuse") or {} for r in rows])  # the run summary's own figures
    slots, pairs = 0, 0
    for r in rows:
        seen: set[tuple[str, str]] = set()
        for step in r["trace"]["steps"]:
            for call in step.get("llm_calls", []):
                if call["role"] != "summarizer":
                    continue
                live = call["messages"][-1]["content"].split("## Your turn")[-1]
                entity = re.search(r"^Entity: (.+)$", live, re.M)
                docs = re.findall(r"^##### (.+)$", live, re.M)
                slots += len(docs)
                seen.update(((entity.group(1).casefold() if entity else ""), d) for d in docs)
        pairs += len(seen)
    prompt = sum(c["prompt_tokens"] for c in reuse.get("reuse", {}).values())
    return {
        "run": str(run), "questions": len(rows),
        "prompt_tokens_per_q": round(prompt / max(len(rows), 1)),
        "reused_share": reuse.get("reused_token_share"), "by_role": reuse.get("reuse", {}),
        "seconds_per_q": round(sum(r["seconds"] for r in rows) / max(len(rows), 1), 1),
        "summarizer_doc_slots": slots, "summarizer_distinct_entity_docs": pairs,
    }


def blocks(spec: str) -> None:
    """Time prompts that share a growing part of one 1,024-token prompt (the engine's own pipeline)."""
    import numpy as np
    import openvino as ov

    from tandem.llm import load_llm

    llm = load_llm(spec, engine="openvino", num_threads=1)  # prepares the model once and gives its folder
    folder = llm.path
    llm.close()
    import openvino_genai as ovg

    scheduler = ovg.SchedulerConfig()
    scheduler.enable_prefix_caching, scheduler.cache_size = True, 1
    scheduler.max_num_seqs, scheduler.max_num_batched_tokens, scheduler.dynamic_split_fuse = 4, 256, True
    pipe = ovg.ContinuousBatchingPipeline(folder, scheduler, "CPU", {"INFERENCE_NUM_THREADS": 1})
    config = ovg.GenerationConfig()
    config.max_new_tokens = 1
    ids = itertools.count()

    def seconds(tokens: list[int]) -> float:
        pipe.add_request(next(ids), ov.Tensor(np.array([tokens], dtype=np.int64)), config)
        start = time.perf_counter()
        while pipe.has_non_finished_requests():
            pipe.step()
        return time.perf_counter() - start

    rng = np.random.default_rng(0)
    base = [int(t) for t in rng.integers(100, 20000, size=1024)]
    seconds([int(t) for t in rng.integers(100, 20000, size=64)])  # the first request's one-off costs
    print(json.dumps({"cold_1024": round(seconds(base), 3)}))
    for shared in (512, 960, 976, 992, 1000, 1008, 1016):
        tail = [int(t) for t in rng.integers(100, 20000, size=1024 - shared)]
        print(json.dumps({"shared": shared, "new": 1024 - shared, "seconds": round(seconds(base[:shared] + tail), 3)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", type=Path)
    parser.add_argument("--blocks", action="store_true", help="measure the engine's KV block size")
    parser.add_argument("--llm", default="local:smollm2", help="the model --blocks loads (default: %(default)s)")
    args = parser.parse_args()
    if args.blocks:
        blocks(args.llm)
    for run in args.runs:
        print(json.dumps(run_figures(run), indent=2))


if __name__ == "__main__":
    main()
