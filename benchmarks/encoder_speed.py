"""Encoder throughput: sentence-transformers' ``encode()`` vs the raw forward pass vs tandem's backends.

Passages are the HotpotQA dev500 pool (de-duplicated by title+text, encoded as ``Document.contents``,
i.e. ``title\\ntext``). Every variant is warmed up once, then timed ``--repeats`` times in
interleaved rounds (st, raw, backend1, backend2, st, raw, ...) so a burst of someone else's CPU work
hits all of them; the report gives the median passages/s (wall clock) and passages per CPU-second
of this process (less sensitive to other load). Prints JSON.

Variants:
- ``st_default``: ``SentenceTransformer.encode(texts, batch_size=64, normalize_embeddings=True)``.
- ``raw_forward``: the same HF module's forward + mean pooling + normalisation on the same
  (length-sorted) batches, pre-tokenised outside the timer, under ``torch.no_grad``: the most a
  torch-only encoder could gain by removing sentence-transformers' overhead.
- each ``--backends`` entry: ``load_encoder(backend=...).encode(texts, batch_size=64)``
  (tokenisation included, like ``st_default``).

``--recall`` also encodes the whole pool (4,858 passages) and the 500 questions with ``st`` and
each backend and reports recall@5 (gold = ``is_supporting`` paragraphs, exact inner product).

    python benchmarks/encoder_speed.py [--n 2000] [--repeats 3] [--recall] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from tandem.index.encoder import DEFAULT_BACKEND, ENCODERS, Encoder, load_encoder
from tandem.model_files import offline_env

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "hotpotqa" / "dev500.jsonl"


def log(msg: str) -> None:
    """Progress on stderr (stdout carries the JSON)."""
    print(f"[encoder_speed] {msg}", file=sys.stderr, flush=True)


def load_pool(path: Path) -> tuple[list[str], list[str], list[set[int]]]:
    """Passages (de-duplicated by title+text), questions, and each question's gold passage rows."""
    seen: dict[tuple[str, str], int] = {}
    passages: list[str] = []
    questions: list[str] = []
    gold: list[set[int]] = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            rec = json.loads(line)
            wanted: set[int] = set()
            for ctx in rec["contexts"]:
                key = (ctx["title"], ctx["paragraph_text"])
                if key not in seen:
                    seen[key] = len(passages)
                    passages.append(f"{key[0]}\n{key[1]}" if key[0] else key[1])
                if ctx.get("is_supporting"):
                    wanted.add(seen[key])
            questions.append(rec["question_text"])
            gold.append(wanted)
    return passages, questions, gold


def rss_mb() -> float:
    """Current resident set size of this process, MiB."""
    return psutil.Process().memory_info().rss / 2**20


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def make_raw_forward(st_model: Any, texts: Sequence[str], batch_size: int) -> Callable[[], np.ndarray]:
    """Forward + mean pooling of ``st_model``'s transformer on sentence-transformers' own batches."""
    import torch

    hf = st_model[0].auto_model
    order = np.argsort([-st_model._input_length(t) for t in texts])  # exactly encode()'s batches
    batches = []
    for start in range(0, len(texts), batch_size):
        rows = order[start : start + batch_size]
        feats = st_model.preprocess([texts[i] for i in rows])
        batches.append((rows, feats["input_ids"], feats["attention_mask"]))

    def run() -> np.ndarray:
        out = np.empty((len(texts), hf.config.hidden_size), dtype=np.float32)
        with torch.no_grad():
            for rows, ids, mask in batches:
                hidden = hf(input_ids=ids, attention_mask=mask).last_hidden_state
                m = mask.unsqueeze(-1).to(hidden.dtype)
                vec = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
                out[rows] = torch.nn.functional.normalize(vec, dim=-1).numpy()
        return out

    return run


def compare(vecs: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    """Max absolute element difference and mean/min row cosine of ``vecs`` against ``ref``."""
    cos = (vecs * ref).sum(axis=1)
    return {
        "max_abs_diff": round(float(np.abs(vecs - ref).max()), 6),
        "mean_cosine": round(float(cos.mean()), 6),
        "min_cosine": round(float(cos.min()), 6),
    }


def recall_at_k(pvecs: np.ndarray, qvecs: np.ndarray, gold: list[set[int]], k: int = 5) -> float:
    """Mean fraction of each question's gold passages among its top-k by inner product."""
    scores = qvecs @ pvecs.T
    top = np.argpartition(-scores, k, axis=1)[:, :k]
    hits = [len(set(row.tolist()) & g) / len(g) for row, g in zip(top, gold, strict=True) if g]
    return float(np.mean(hits))


def main() -> None:
    """Run the benchmark and print its JSON report."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--n", type=int, default=2000, help="passages timed (from the de-duplicated pool)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per variant (median reported)")
    parser.add_argument(
        "--backends", nargs="+", default=[b for b in ENCODERS if b != "st"], help="tandem backends to time"
    )
    parser.add_argument("--recall", action="store_true", help="also recall@5 on the full dev500 pool (slow)")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    offline_env()
    import torch

    passages, questions, gold = load_pool(args.data)
    texts = passages[: args.n]
    bs = args.batch_size
    report: dict[str, Any] = {
        "data": str(args.data),
        "n_passages": len(texts),
        "batch_size": bs,
        "repeats": args.repeats,
        "cpus": len(os.sched_getaffinity(0)),
        "torch_threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "default_backend": DEFAULT_BACKEND,
    }

    variants: dict[str, Callable[[], np.ndarray]] = {}
    memory: dict[str, float] = {}
    before = rss_mb()
    st_enc = load_encoder(backend="st")
    st_model = st_enc.model  # type: ignore[attr-defined]
    variants["st_default"] = lambda: st_model.encode(
        texts, batch_size=bs, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
    )
    memory["st_default"] = rss_mb() - before
    variants["raw_forward"] = make_raw_forward(st_model, texts, bs)
    encoders: dict[str, Encoder] = {}
    for name in args.backends:
        before = rss_mb()
        start = time.perf_counter()
        enc = load_encoder(backend=name)
        log(f"loaded {name} in {time.perf_counter() - start:.1f}s (built cache: {getattr(enc, 'built', None)})")
        encoders[name] = enc
        variants[name] = lambda enc=enc: enc.encode(texts, batch_size=bs)  # type: ignore[misc]
        memory[name] = rss_mb() - before

    vectors: dict[str, np.ndarray] = {}
    for name, fn in variants.items():  # warm-up, and the vectors compared below
        log(f"warm-up {name}")
        vectors[name] = np.asarray(fn(), dtype=np.float32)
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    for rnd in range(args.repeats):
        for name, fn in variants.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall[name].append(len(texts) / (time.perf_counter() - t0))
            cpu[name].append(len(texts) / (time.process_time() - c0))
        log(f"round {rnd + 1}: " + ", ".join(f"{k} {v[-1]:.1f}/s" for k, v in wall.items()))

    base = statistics.median(wall["st_default"])
    results: dict[str, Any] = {}
    for name in variants:
        med = statistics.median(wall[name])
        results[name] = {
            "passages_per_s": round(med, 1),
            "passages_per_s_runs": [round(x, 1) for x in wall[name]],
            "passages_per_cpu_s": round(statistics.median(cpu[name]), 1),
            "speedup_vs_st": round(med / base, 2),
            "rss_added_mb": round(memory.get(name, 0.0), 1),
            **compare(vectors[name], vectors["st_default"]),
        }
    report["results"] = results

    if args.recall:
        recall: dict[str, float] = {}
        for name, enc in {"st": st_enc, **encoders}.items():
            start = time.perf_counter()
            pvecs = enc.encode(passages, batch_size=bs)
            qvecs = enc.encode(questions, batch_size=bs)
            recall[name] = round(100 * recall_at_k(pvecs, qvecs, gold, 5), 2)
            log(f"recall@5 {name}: {recall[name]} ({time.perf_counter() - start:.0f}s)")
        report["recall_at_5"] = {"pool_passages": len(passages), "questions": len(questions), **recall}

    report["peak_rss_mb"] = round(peak_rss_mb(), 1)
    report["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
