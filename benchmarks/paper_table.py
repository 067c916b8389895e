"""Render QA run folders as the markdown figures table of docs/methods/baselines.md, with 95 % bootstrap
confidence intervals (scipy.stats.bootstrap, percentile, 2,000 resamples, seed 0) of EM, F1, acc and judge
over each run's answered questions.

    python benchmarks/paper_table.py runs/paper/direct runs/paper/ircot ...
    python benchmarks/paper_table.py runs/paper/report.json        # `tandem report --json` output: no intervals

The judge cell says ``self`` when the generator judged itself, and ``unreliable`` (with the calibration
accuracy) when the judge's calibration on gold vs wrong answers fell below 0.8: such a column is not a
measurement. Rows of unfinished runs are marked; their n is the questions they finished.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy.stats import bootstrap

from tandem.eval.judge import judge_label
from tandem.eval.report import load_runs
from tandem.eval.runner import read_finished

INTERVALS = ("em", "f1", "acc", "judge")
COLUMNS = [("questions", "n", "{:d}"), ("em", "EM", "{:.3f}"), ("f1", "F1", "{:.3f}"), ("acc", "acc", "{:.3f}"),
           ("judge", "judge", "{:.3f}"), ("gold_doc_recall", "gold-doc recall", "{:.2f}"),
           ("llm_calls_per_q", "calls/q", "{:.1f}"), ("tokens_per_q", "tokens/q", "{:.0f}"),
           ("seconds_per_q", "s/q", "{:.1f}"), ("fallback_rate", "fallback rate", "{:.2f}")]


def interval(values: Sequence[float], resamples: int = 2000) -> tuple[float, float] | None:
    """The 95 % percentile-bootstrap interval of the mean of ``values`` (None for fewer than 2 values; a
    constant sample's interval is the value itself)."""
    data = np.asarray(values, dtype=float)
    if len(data) < 2:
        return None
    if np.all(data == data[0]):
        return float(data[0]), float(data[0])
    res = bootstrap((data,), np.mean, confidence_level=0.95, n_resamples=resamples, method="percentile",
                    random_state=np.random.default_rng(0))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def with_intervals(row: dict, folder: Path) -> dict:
    """``row`` plus ``<metric>_ci`` for each of INTERVALS, from the run's predictions."""
    path = folder / "predictions.jsonl"
    if not path.exists():
        return row
    scores = [r["scores"] for r in read_finished(path).values() if "error" not in r]
    return {**row, **{f"{key}_ci": interval([s[key] for s in scores]) for key in INTERVALS if scores and key in scores[0]}}


def cell(row: dict, key: str, fmt: str) -> str:
    if row.get(key) is None:
        return "–"
    text = judge_label(row) if key == "judge" else fmt.format(row[key])
    ci = row.get(f"{key}_ci")
    if ci is not None:
        value, _, note = text.partition(" (")
        text = f"{value} [{ci[0]:.3f}, {ci[1]:.3f}]" + (f" ({note}" if note else "")
    return text


def table(rows: list[dict]) -> str:
    """One markdown row per run; '–' where a run has no such figure (no retrieval, no JSON roles)."""
    head = "| method | " + " | ".join(label for _, label, _ in COLUMNS) + " |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 1)]
    for row in rows:
        cells = [cell(row, key, fmt) for key, _, fmt in COLUMNS]
        name = f"`{row.get('method') or row['run']}`" + (" (unfinished run)" if row.get("partial") else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(args: list[str]) -> str:
    if len(args) == 1 and args[0].endswith(".json"):
        return table(json.loads(Path(args[0]).read_text(encoding="utf-8")))
    folders = [Path(a) for a in args]
    return table([with_intervals(row, folder) for row, folder in zip(load_runs(folders, partial=True), folders, strict=True)])


if __name__ == "__main__":
    print(main(sys.argv[1:]))
