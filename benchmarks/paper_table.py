"""Render `tandem report --json` output as the markdown figures table of docs/methods/baselines.md.

    python benchmarks/paper_table.py runs/paper/report.json

Rows of unfinished runs (`tandem report --partial`) are marked; their n is the questions they finished.
"""

from __future__ import annotations

import json
import sys

COLUMNS = [("questions", "n", "{:d}"), ("em", "EM", "{:.3f}"), ("f1", "F1", "{:.3f}"), ("acc", "acc", "{:.3f}"),
           ("judge", "judge", "{:.3f}"), ("gold_doc_recall", "gold-doc recall", "{:.2f}"),
           ("llm_calls_per_q", "calls/q", "{:.1f}"), ("tokens_per_q", "tokens/q", "{:.0f}"),
           ("seconds_per_q", "s/q", "{:.1f}"), ("fallback_rate", "fallback rate", "{:.2f}")]


def table(rows: list[dict]) -> str:
    """One markdown row per run; '–' where a run has no such figure (no retrieval, no JSON roles)."""
    head = "| method | " + " | ".join(label for _, label, _ in COLUMNS) + " |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 1)]
    for row in rows:
        cells = [fmt.format(row[key]) if row.get(key) is not None else "–" for key, _, fmt in COLUMNS]
        name = f"`{row.get('method') or row['run']}`" + (" (unfinished run)" if row.get("partial") else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as handle:
        print(table(json.load(handle)))
