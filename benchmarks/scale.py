"""Vector stores at scale on synthetic vectors: build time, peak RSS, size on disk, query latency, recall.

No download and no encoder: the vectors are injected as if an encoder had produced them (encoding
time would dominate and is measured by ``encoder_speed.py``). They are generated in chunks of
50,000 rows from a seed (any chunk can be re-made alone), fed to the store in batches and never
held all at once, so a 5M x 384 run needs no 7.7 GB array.

The data has cluster structure, like real sentence embeddings: N / 100 random centres, each
point its centre plus a displacement in a shared ``latent``-dimensional subspace plus small
isotropic noise, L2-normalised. Uniformly random high-dimensional vectors would make ANN recall
meaningless (every point is about equally far from every other); queries are drawn the same way
from another seed. "Exact" is the true top-10 by inner product, computed by streaming the chunks.

Each (store, N) configuration runs in its own subprocess, so its peak RSS (``VmHWM``, the high-water
mark of this process's own memory; ``ru_maxrss`` would carry the parent's peak over ``exec``) is its
own: build (train on a sample, add in batches, save), open the saved folder again, then
``--queries`` single-query searches (p50/p95 latency) and recall@10 against exact. Results go to
``--out`` (JSON, rewritten after every configuration, so a re-run skips what is done) and stdout.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/scale.py --sizes 100000 1000000 \\
        --stores flat ivfpq ivfpq-disk qdrant --work /tmp/scale --out benchmarks/scale.json
    python benchmarks/scale.py --plot-only --plot docs/scale.png --out benchmarks/scale.json   # only the plot
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from tandem.index.vectors import new_store, open_store
from tandem.io import atomic_path, write_json_atomic

DIM = 384
CHUNK = 50_000
K = 10
PER_CLUSTER = 100  # clusters = N / 100: every N has the same neighbourhood structure
# The documented settings: nlist 256 for every N, trained on 20,000 vectors (>= 39 a list), probing 160 of
# the 256 lists (this data splits its clusters across lists: see docs/scale.md); PQ with
# 48 bytes a vector (8 dimensions a sub-quantiser); rerank: the nprobe lists give rerank * k
# candidates, re-scored exactly from the memory-mapped float rows.
STORES: dict[str, dict[str, Any]] = {
    "flat": {"faiss": "flat"},
    "hnsw": {"faiss": "hnsw"},
    # IVF-Flat over the same lists: where its recall is ivfpq's, the loss is in the lists, not the codes
    "ivf": {"faiss": "ivf", "nlist": 256, "nprobe": 160, "train_size": 20_000},
    "ivfpq": {"faiss": "ivfpq", "nlist": 256, "nprobe": 160, "pq_m": 48, "rerank": 10, "train_size": 20_000},
    "ivfpq-norerank": {"faiss": "ivfpq", "nlist": 256, "nprobe": 160, "pq_m": 48, "rerank": 0, "train_size": 20_000},
    "ivfpq-disk": {"faiss": "ivfpq", "nlist": 256, "nprobe": 160, "pq_m": 48, "rerank": 10, "train_size": 20_000,
                   "on_disk": True},
    "qdrant": {"store": "qdrant"},
}


def log(msg: str) -> None:
    """Progress on stderr (stdout carries the JSON)."""
    print(f"[scale] {msg}", file=sys.stderr, flush=True)


class Synthetic:
    """Clustered unit vectors, made chunk by chunk from a seed, and written once per N to a raw float32
    file in the work folder that every configuration reads chunk by chunk (plain reads, not a memory
    map, so a worker's RSS holds one chunk, not the file)."""

    def __init__(self, seed: int = 0, clusters: int = 10_000, latent: int = 32, spread: float = 0.09,
                 noise: float = 0.02, cache: Path | None = None) -> None:
        rng = np.random.default_rng(seed)
        self.centres = rng.standard_normal((clusters, DIM), dtype=np.float32) / np.sqrt(DIM)
        self.basis = rng.standard_normal((latent, DIM), dtype=np.float32) / np.sqrt(DIM)
        # isotropic noise drawn from a fixed table: full-rank data for a fraction of the generation cost
        self.noise_table = rng.standard_normal((65_536, DIM), dtype=np.float32) * (noise / np.sqrt(DIM))
        self.seed, self.spread, self.cache = seed, spread, cache

    def chunk(self, index: int, n: int = CHUNK, stream: int = 0) -> np.ndarray:
        """Rows ``index * CHUNK ...`` of stream ``stream`` (0 = corpus, 1 = queries)."""
        rng = np.random.default_rng([self.seed, stream, index])
        labels = rng.integers(0, len(self.centres), n)
        z = rng.standard_normal((n, len(self.basis)), dtype=np.float32) * self.spread
        x = self.centres[labels] + z @ self.basis + self.noise_table[rng.integers(0, len(self.noise_table), n)]
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    def batches(self, n: int) -> Any:
        """The first ``n`` corpus rows, chunk by chunk (from the cache file once it is written)."""
        path = self.cache / f"vectors-{n}.f32" if self.cache else None
        if path is not None and not path.exists():
            with atomic_path(path) as tmp, open(tmp, "wb") as handle:
                for i, start in enumerate(range(0, n, CHUNK)):
                    handle.write(self.chunk(i, min(CHUNK, n - start)).tobytes())
        for i, start in enumerate(range(0, n, CHUNK)):
            rows = min(CHUNK, n - start)
            if path is None:
                yield self.chunk(i, rows)
            else:
                yield np.fromfile(path, np.float32, rows * DIM, offset=start * DIM * 4).reshape(rows, DIM)

    def queries(self, n: int) -> np.ndarray:
        return self.chunk(0, n, stream=1)


def exact_top_k(data: Synthetic, n: int, queries: np.ndarray, k: int = K) -> np.ndarray:
    """True top-k rows by inner product, streaming over the corpus chunks."""
    best_scores = np.full((len(queries), 0), -np.inf, np.float32)
    best_rows = np.zeros((len(queries), 0), np.int64)
    offset = 0
    for part in data.batches(n):
        scores = queries @ part.T
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k] if part.shape[0] > k else np.tile(np.arange(len(part)), (len(queries), 1))
        cand_scores = np.concatenate([best_scores, np.take_along_axis(scores, top, 1)], axis=1)
        cand_rows = np.concatenate([best_rows, top + offset], axis=1)
        order = np.argsort(-cand_scores, axis=1, kind="stable")[:, :k]
        best_scores, best_rows = np.take_along_axis(cand_scores, order, 1), np.take_along_axis(cand_rows, order, 1)
        offset += len(part)
    return best_rows


def peak_rss_mib() -> float:
    """This process's peak resident set (Linux ``VmHWM``; ``ru_maxrss`` elsewhere).

    ``ru_maxrss`` survives ``exec``: a worker started by a parent that had grown to 900 MiB reports at
    least 900 MiB, whatever it does itself. ``VmHWM`` belongs to the worker's own address space.
    """
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024 if sys.platform != "darwin" else 2**20)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def run_one(store_name: str, n: int, work: Path, n_queries: int, truth_file: Path, total_queries: int,
            sweep: list[int] | None = None) -> dict[str, Any]:
    """One configuration, in this (fresh) process: the first ``n_queries`` of the ``total_queries``."""
    data = Synthetic(clusters=n // PER_CLUSTER, cache=work)
    baseline_rss = peak_rss_mib()  # imports (tandem loads torch)
    folder = work / f"{store_name}-{n}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    params = dict(STORES[store_name])
    start = time.perf_counter()
    store = new_store(params, DIM, folder)
    train_n = int(params.get("train_size", 0))
    if train_n:  # a sample from the first chunks, as a streaming build trains on its first shards
        sample = np.concatenate([c for _, c in zip(range(-(-train_n // CHUNK)), data.batches(n), strict=False)])[:train_n]
        store.train(sample)
        del sample
    train_s = time.perf_counter() - start
    for done, part in enumerate(data.batches(n), 1):
        store.add(part)
        if done % 20 == 0:
            log(f"{store_name} N={n}: added {done * CHUNK:,}")
    store.save(folder)
    build_s = time.perf_counter() - start
    resolved = store.params
    del store

    store = open_store(folder, resolved)
    queries = data.queries(total_queries)[:n_queries]
    truth = np.load(truth_file)[:n_queries]
    result = {
        "store": store_name, "n": n, "dim": DIM, "params": {k: v for k, v in resolved.items() if v is not None},
        "build_s": round(build_s, 2), "train_s": round(train_s, 2),
        **measure(store, queries, truth),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "baseline_rss_mib": round(baseline_rss, 1),
        "disk_mib": round(folder_bytes(folder) / 2**20, 1),
        "queries": len(queries),
    }
    if sweep and "nprobe" in resolved:  # after the peak is taken: the same saved store, other probe counts
        result["sweep"] = [{"nprobe": p, **measure(open_store(folder, {**resolved, "nprobe": p}), queries, truth)}
                           for p in sweep]
    return result


def measure(store: Any, queries: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """Single-query latency p50/p95 and recall@10 against the exact top-10."""
    store.search(queries[:5], K)  # warm-up (first page faults, lazy maps)
    latencies, rows = [], []
    for q in queries:
        t = time.perf_counter()
        rows.append(store.search(q[None, :], K)[1][0])
        latencies.append(time.perf_counter() - t)
    recall = float(np.mean([len(set(r) & set(g)) / K for r, g in zip(rows, truth, strict=True)]))
    return {"query_p50_ms": round(float(np.percentile(latencies, 50)) * 1e3, 3),
            "query_p95_ms": round(float(np.percentile(latencies, 95)) * 1e3, 3), "recall_at_10": round(recall, 4)}


def ground_truth(n: int, work: Path, n_queries: int) -> Path:
    """Exact top-10 of the queries over the first n rows (cached in ``work``)."""
    path = work / f"exact-{n}-{n_queries}.npy"
    if not path.exists():
        start = time.perf_counter()
        data = Synthetic(clusters=n // PER_CLUSTER, cache=work)
        np.save(path, exact_top_k(data, n, data.queries(n_queries)))
        log(f"exact top-{K} for N={n:,}: {time.perf_counter() - start:.0f}s")
    return path


def plot(results: list[dict[str, Any]], target: Path) -> None:
    """Build time, peak RSS, disk size, p95 latency and recall against N, a line per store."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("build_s", "build (s)"), ("peak_rss_mib", "peak RSS (MiB)"), ("disk_mib", "on disk (MiB)"),
              ("query_p95_ms", "query p95 (ms)"), ("recall_at_10", "recall@10 vs exact")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.4))
    for ax, (key, label) in zip(axes, panels, strict=True):
        for name in dict.fromkeys(r["store"] for r in results):
            points = sorted((r["n"], r[key]) for r in results if r["store"] == name)
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
        ax.set_xscale("log")
        if key != "recall_at_10":
            ax.set_yscale("log")
        ax.set_xlabel("vectors (N, 384 dims)")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(target, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--stores", nargs="+", default=["flat", "ivfpq", "ivfpq-disk"], choices=sorted(STORES))
    ap.add_argument("--queries", type=int, default=1000, help="queries for latency and recall")
    ap.add_argument("--qdrant-queries", type=int, default=100, help="fewer for the embedded Qdrant (brute force in Python)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/tandem-scale"), help="where the stores are built (large)")
    ap.add_argument("--out", type=Path, default=None, help="results JSON (configurations already in it are skipped)")
    ap.add_argument("--plot", type=Path, default=None, help="write the figure from --out's results")
    ap.add_argument("--plot-only", action="store_true", help="only redraw --plot from --out's rows; run nothing")
    ap.add_argument("--keep", action="store_true", help="keep the built stores")
    ap.add_argument("--sweep-nprobe", type=int, nargs="+", default=None, metavar="P",
                    help="IVF stores: also measure recall and latency at these nprobe values (same saved store)")
    ap.add_argument("--worker", nargs=3, metavar=("STORE", "N", "QUERIES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)

    if args.worker:
        name, n, nq = args.worker[0], int(args.worker[1]), int(args.worker[2])
        print(json.dumps(run_one(name, n, args.work, nq, ground_truth(n, args.work, args.queries), args.queries,
                                 args.sweep_nprobe)))
        return
    results: list[dict[str, Any]] = json.loads(args.out.read_text())["results"] if args.out and args.out.exists() else []
    if args.plot_only:
        if not (args.plot and results):
            ap.error("--plot-only needs --plot FILE and an --out file with rows")
        plot(results, args.plot)
        return
    done = {(r["store"], r["n"]) for r in results}
    for n in args.sizes:
        for name in args.stores:
            if (name, n) in done:
                continue
            ground_truth(n, args.work, args.queries)
            nq = args.qdrant_queries if name == "qdrant" else args.queries
            log(f"{name} N={n:,} ...")
            proc = subprocess.run([sys.executable, __file__, "--worker", name, str(n), str(nq), "--work", str(args.work),
                                   "--queries", str(args.queries),
                                   *(["--sweep-nprobe", *map(str, args.sweep_nprobe)] if args.sweep_nprobe else [])],
                                  capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                log(f"{name} N={n:,} failed (exit {proc.returncode}): {proc.stderr.strip()[-800:]}")
                continue
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            log(json.dumps(result))
            results.append(result)
            if not args.keep:
                shutil.rmtree(args.work / f"{name}-{n}", ignore_errors=True)
            if args.out:
                write_json_atomic(args.out, _report(results))
    print(json.dumps(_report(results), indent=2))
    if args.plot:
        plot(results, args.plot)


def _report(results: list[dict[str, Any]]) -> dict[str, Any]:
    return {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "omp_num_threads": os.environ.get("OMP_NUM_THREADS")},
            "k": K, "results": results}


if __name__ == "__main__":
    main()
