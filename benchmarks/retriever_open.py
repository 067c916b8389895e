"""Cost of opening a retriever on a loaded index, then one search: what the server's ``/retrieve`` does
per request (``open_retriever(index, kind).search(query, k)``).

A synthetic corpus (``benchmarks/index_stream.py``'s passages: N passages of 40 Zipf-drawn words,
seeded, no download) is indexed once (bm25, streamed build, so ``docs.jsonl`` is memory-mapped) into
``--folder`` and reused. After one warm-up request (the bm25 model is loaded then), each query of
``--repeat`` rounds is timed from ``open_retriever`` to the end of ``search``. Prints one JSON object
(median and max milliseconds).

    python benchmarks/retriever_open.py [--docs 50000] [--folder /tmp/tandem-retriever-open] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from index_stream import passages  # noqa: E402

QUERIES = ["w1 w20 w300", "w5 w77", "w2 w3 w4", "w900 w10"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=50_000)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/tandem-retriever-open"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from tandem.index import build_index, open_index
    from tandem.retrieve import open_retriever

    folder = args.folder / f"bm25-{args.docs}"
    if not (folder / "manifest.json").exists():
        build_index(passages(args.docs), folder, kind="bm25", shard_size=10_000)
    index = open_index(folder)
    open_retriever(index, "bm25").search(QUERIES[0], 5)
    times = []
    for query in QUERIES * args.repeat:
        start = time.perf_counter()
        open_retriever(index, "bm25").search(query, 5)
        times.append(1000 * (time.perf_counter() - start))
    print(json.dumps({"benchmark": "retriever_open", "docs": len(index.store), "requests": len(times),
                      "median_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1),
                      "machine": platform.machine(), "cpus": os.cpu_count(), "command": "python " + " ".join(sys.argv)}))


if __name__ == "__main__":
    main()
