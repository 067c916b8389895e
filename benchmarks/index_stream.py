"""Peak memory of a streamed index build vs a build from an in-memory list, as the corpus grows.

A synthetic corpus of N passages (40 words each drawn from a Zipf-like law over 20,000 made-up words,
seeded, generated lazily; no download) is indexed in a fresh process per configuration:

- ``source=stream``: the passages come from a generator and are read once, shard by shard
  (``build_index(iter(...), shard_size=...)``), as ``tandem index --corpus FILE.jsonl`` reads a file;
- ``source=list``: the passages are first materialised as a list of ``Document`` (what loading a
  whole corpus does), then built the same way.

``kind=dense`` encodes with a fast hashing encoder (``tandem.testing.encoders.HashingEncoder``,
``--dim`` buckets) so encoding time does not dominate; ``kind=bm25`` builds the bm25s index only.
Reported per run (MiB): ``rss_base`` (after imports), ``peak_encode`` (peak RSS when the last shard was
encoded: the streaming phase), ``peak_total`` (peak RSS of the whole build, the assembly included:
FAISS flat holds N x dim float32, bm25s its score triples and sparse matrix), ``seconds``,
``index_mib`` (the index folder on disk). Prints one JSON object.

    python benchmarks/index_stream.py [--sizes 20000 200000] [--kinds dense bm25] [--sources stream list]
                                      [--shard-size 5000] [--dim 32] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

VOCAB = 20_000
WORDS_PER_PASSAGE = 40


def log(msg: str) -> None:
    """Progress on stderr (stdout carries the JSON)."""
    print(f"[index_stream] {msg}", file=sys.stderr, flush=True)


def passages(n: int, seed: int = 0) -> Iterator[Any]:
    """``n`` synthetic passages, generated lazily in blocks."""
    import numpy as np

    from tandem.types import Document

    rng = np.random.default_rng(seed)
    ranks = np.arange(1, VOCAB + 1)
    probs = (1.0 / ranks) / (1.0 / ranks).sum()
    block = 1000
    for start in range(0, n, block):
        size = min(block, n - start)
        words = rng.choice(VOCAB, size=(size, WORDS_PER_PASSAGE), p=probs)
        for i, row in enumerate(words):
            yield Document(f"p{start + i}", f"Passage {start + i}", " ".join(f"w{w}" for w in row))


def vm_hwm_mib() -> float:
    """This process's peak RSS so far (VmHWM), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def vm_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def child(n: int, kind: str, source: str, shard_size: int, dim: int) -> dict[str, Any]:
    """One build in this (fresh) process."""
    from tandem.index import build_index
    from tandem.testing.encoders import HashingEncoder

    base = vm_rss_mib()
    peak_encode = [base]

    def on_progress(done: int, total: int) -> None:
        if done >= n:
            peak_encode[0] = vm_hwm_mib()

    docs = list(passages(n)) if source == "list" else passages(n)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "idx"
        build_index(docs, out, kind=kind, encoder=HashingEncoder(dim=dim), shard_size=shard_size,
                    on_progress=on_progress)
        seconds = time.perf_counter() - start
        size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return {"n": n, "kind": kind, "source": source, "shard_size": shard_size, "dim": dim,
            "rss_base": round(base, 1), "peak_encode": round(peak_encode[0], 1),
            "peak_total": round(vm_hwm_mib(), 1), "seconds": round(seconds, 2), "index_mib": round(size / 2**20, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[20_000, 200_000])
    parser.add_argument("--kinds", nargs="+", default=["dense", "bm25"], choices=["dense", "bm25"])
    parser.add_argument("--sources", nargs="+", default=["stream", "list"], choices=["stream", "list"])
    parser.add_argument("--shard-size", type=int, default=5000)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", nargs=3, metavar=("N", "KIND", "SOURCE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        n, kind, source = args.child
        print(json.dumps(child(int(n), kind, source, args.shard_size, args.dim)))
        return
    runs = []
    for kind in args.kinds:
        for source in args.sources:
            for n in args.sizes:
                log(f"{kind} {source} n={n}")
                done = subprocess.run([sys.executable, __file__, "--child", str(n), kind, source,
                                       "--shard-size", str(args.shard_size), "--dim", str(args.dim)],
                                      check=True, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
                runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
                log(json.dumps(runs[-1]))
    report = {"benchmark": "index_stream", "machine": platform.machine(), "cpus": os.cpu_count(),
              "words_per_passage": WORDS_PER_PASSAGE, "vocab": VOCAB, "runs": runs,
              "command": "python " + " ".join(sys.argv)}
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
