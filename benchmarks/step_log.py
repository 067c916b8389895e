"""Read the local engine's step log (``$TANDEM_OV_STEP_LOG``) in parts of a run: did its steps get slower, or the
gaps between them longer?

    TANDEM_OV_STEP_LOG=steps.tsv tandem eval qa ...     # the engine appends one line per step
    python benchmarks/step_log.py steps.tsv [--parts 10]

Each line (``tandem.llm.ov_worker``): the step's end (Unix time), requests running and waiting, the step's wall
seconds, then the pipeline's KV-cache use in percent, KV-cache bytes and requests scheduled. The steps are cut
into ``--parts`` runs of equal length; per part: its minutes, steps, mean requests running and waiting, the
median and 90th-percentile step seconds (most steps decode one token per running request, so the median is a
decode step), the engine's busy share (step seconds over the part's wall time: the rest is gaps, the caller's
time), the median gap between steps, and the mean KV-cache use. A run whose steps slow down at the same
requests and cache use points at the engine; one whose busy share falls points at the caller.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path


def read(path: Path) -> list[tuple[float, int, int, float, float]]:
    """(end time, running, waiting, step seconds, KV-cache use %) per line; a damaged line is an error naming it."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        sys.exit(f"error: {path}: cannot read the step log ({exc.strerror or exc})")
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        fields = line.split("\t")
        try:
            rows.append((float(fields[0]), int(fields[1]), int(fields[2]), float(fields[3]),
                         float(fields[4]) if len(fields) > 4 and fields[4] else float("nan")))
        except (ValueError, IndexError):
            sys.exit(f"error: {path}:{n}: not a step-log line ({line[:60]!r})")
    return rows


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=10)[int(q * 10) - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", type=Path)
    parser.add_argument("--parts", type=int, default=10, help="equal runs of steps to compare (default 10)")
    args = parser.parse_args()
    rows = read(args.log)
    if len(rows) < 2 * args.parts:
        sys.exit(f"error: {args.log}: {len(rows)} steps, too few for {args.parts} parts")
    print(f"{args.log}: {len(rows)} steps over {(rows[-1][0] - rows[0][0]) / 60:.1f} min")
    print("| part | minutes | steps | running | waiting | step s, median | step s, p90 | busy share | gap s, median "
          "| KV use % |")
    print("|---" * 10 + "|")
    size = len(rows) // args.parts
    for part in range(args.parts):
        chunk = rows[part * size: (part + 1) * size if part < args.parts - 1 else len(rows)]
        before = rows[part * size - 1][0] if part else chunk[0][0] - chunk[0][3]
        wall = chunk[-1][0] - before
        gaps = [max(0.0, (t - s) - prev) for (t, _r, _w, s, _k), (prev, *_) in zip(chunk[1:], chunk, strict=False)]
        steps = [r[3] for r in chunk]
        print(f"| {part + 1} | {wall / 60:.1f} | {len(chunk)} | {statistics.fmean(r[1] for r in chunk):.2f} "
              f"| {statistics.fmean(r[2] for r in chunk):.2f} | {statistics.median(steps):.3f} "
              f"| {quantile(steps, 0.9):.3f} | {sum(steps) / wall:.2f} | {statistics.median(gaps):.3f} "
              f"| {statistics.fmean(r[4] for r in chunk):.1f} |")


if __name__ == "__main__":
    main()
