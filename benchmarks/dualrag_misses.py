"""Where a DualRAG run's answers go wrong, read from its traces: for each question not answered exactly
(F1 below 1), the first of these that holds (a gold answer "in" a text: its normalised form is a substring
of the text's normalised form):

- the gold answer is in the long answer, so the re-answer (the paper's answer-type extraction) cut it;
- it is in the final outline (the Knowledge Summarizer's notes the answer was written from);
- it is in some note of some step, but not in the final outline;
- every gold passage was read (gold-passage recall 1), yet no note holds the answer;
- a gold passage was never read.

    python benchmarks/dualrag_misses.py RUN [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path
from typing import Any

from tandem.eval.qa_metrics import normalize_answer
from tandem.eval.runner import read_finished

KINDS = (
    "right (F1 1)",
    "gold in the long answer, the re-answer cut it",
    "gold in the final outline, the answer missed it",
    "gold in a note, not in the final outline",
    "every gold passage read, gold in no note",
    "a gold passage never read",
)


def kind_of(record: dict[str, Any]) -> str:
    """Which of :data:`KINDS` a prediction record of a DualRAG run falls under."""
    golds = [normalize_answer(g) for g in record["golden_answers"] if normalize_answer(g)]
    steps = record.get("trace", {}).get("steps", [])
    notes = normalize_answer(json.dumps([step.get("notes", {}) for step in steps]))
    final = normalize_answer(str(steps[-1].get("notes", {}).get("outline", ""))) if steps else ""

    def holds(text: str) -> bool:
        return any(g in text for g in golds)

    if record.get("scores", {}).get("f1", 0.0) >= 0.99:
        return KINDS[0]
    if holds(normalize_answer(record.get("prediction") or "")):
        return KINDS[1]
    if holds(final):
        return KINDS[2]
    if holds(notes):
        return KINDS[3]
    return KINDS[4] if (record.get("gold_doc_recall") or 0.0) >= 0.99 else KINDS[5]


def main() -> None:
    """Print how many questions of the run fall under each kind."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a DualRAG eval folder (with predictions.jsonl)")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = parser.parse_args()
    path = args.run / "predictions.jsonl"
    if not path.exists():
        raise SystemExit(f"{path}: no such file (a folder written by `tandem eval qa --method dualrag`)")
    records = [r for r in read_finished(path).values() if not r.get("error")]
    counts = collections.Counter(kind_of(r) for r in records)
    if args.json:
        print(json.dumps({"questions": len(records), **{k: counts[k] for k in KINDS}}))
        return
    print(f"{len(records)} questions of {args.run}")
    for kind in KINDS:
        print(f"{counts[kind]:5d}  {kind}")


if __name__ == "__main__":
    main()
