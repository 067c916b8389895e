"""Render QA run folders as the markdown figures table of docs/methods/baselines-measured.md, with 95 % bootstrap
confidence intervals (scipy.stats.bootstrap, percentile, 2,000 resamples, seed 0) of EM, F1, acc and judge
over each run's answered questions.

    python benchmarks/paper_table.py runs/paper/direct runs/paper/ircot ...
    python benchmarks/paper_table.py runs/paper/report.json        # `tandem report --json` output: no intervals
    python benchmarks/paper_table.py RUN ... --minus naive_rag --pair dualrag:ircot   # and paired differences

``--minus M`` adds a second table: each other run minus the run of method M, and ``--pair A:B`` (repeatable)
run A minus run B, over the questions both answered (:func:`paired.compare`: paired bootstrap 95 %
intervals of EM, F1 and acc), so unfinished runs are compared on what they share.

The judge cell says ``self`` when the generator judged itself, and ``unreliable`` (with the calibration
accuracy) when the judge's calibration on gold vs wrong answers fell below 0.8: such a column is not a
measurement. Rows of unfinished runs are marked; their n is the questions they finished.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tandem.eval.intervals import mean_interval
from tandem.eval.judge import judge_label
from tandem.eval.report import load_runs
from tandem.eval.runner import read_finished

sys.path.insert(0, str(Path(__file__).resolve().parent))  # paired.py, beside this script
from paired import compare  # noqa: E402

INTERVALS = ("em", "f1", "acc", "judge")
COLUMNS = [("questions", "n", "{:d}"), ("em", "EM", "{:.3f}"), ("f1", "F1", "{:.3f}"), ("acc", "acc", "{:.3f}"),
           ("judge", "judge", "{:.3f}"), ("gold_doc_recall", "gold-doc recall", "{:.2f}"),
           ("llm_calls_per_q", "calls/q", "{:.1f}"), ("tokens_per_q", "tokens/q", "{:.0f}"),
           ("seconds_per_q", "s/q", "{:.1f}"), ("fallback_rate", "fallback rate", "{:.2f}")]


def with_intervals(row: dict, folder: Path) -> dict:
    """``row`` plus ``<metric>_ci`` for each of INTERVALS, from the run's predictions."""
    path = folder / "predictions.jsonl"
    if not path.exists():
        return row
    scores = [r["scores"] for r in read_finished(path).values() if "error" not in r]
    return {**row, **{f"{key}_ci": mean_interval([s[key] for s in scores]) for key in INTERVALS if scores and key in scores[0]}}


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


def paired_table(pairs: list[tuple[str, Path, Path]]) -> str:
    """One markdown row per (label, run A, run B): A - B over the questions both answered."""
    lines = ["| A - B | n | F1 A | F1 B | F1 A - B [95 %] | EM A - B [95 %] | acc A - B [95 %] |", "|" + "---|" * 7]
    for label, a, b in pairs:
        r = compare(a, b)
        diffs = [f"{r[m]['diff']:+.3f} [{r[m]['low']:+.3f}, {r[m]['high']:+.3f}]" for m in ("f1", "em", "acc")]
        lines.append(f"| {label} | {r['questions']} | {r['f1']['a']:.3f} | {r['f1']['b']:.3f} | " + " | ".join(diffs) + " |")
    return "\n".join(lines)


def split_args(args: list[str]) -> tuple[list[Path], str | None, list[tuple[str, str]]]:
    """The run folders, ``--minus M``'s method and the ``--pair A:B`` pairs among ``args``."""
    folders, base, pairs = [], None, []
    it = iter(args)
    for arg in it:
        if arg in ("--minus", "--pair"):
            value = next(it, None)
            if not value or (arg == "--pair" and ":" not in value):
                raise SystemExit(f"{arg} needs a value ({'METHOD' if arg == '--minus' else 'A:B'})")
            if arg == "--minus":
                base = value
            else:
                pairs.append(tuple(value.split(":", 1)))
        else:
            folders.append(Path(arg))
    return folders, base, pairs


def main(args: list[str]) -> str:
    if len(args) == 1 and args[0].endswith(".json"):
        return table(json.loads(Path(args[0]).read_text(encoding="utf-8")))
    folders, base, pairs = split_args(args)
    rows = load_runs(folders, partial=True)
    names = [row.get("method") or row["run"] for row in rows]
    methods = dict(zip(names, folders, strict=True))
    if (base or pairs) and len(methods) < len(names):
        raise SystemExit(f"--minus/--pair need one run per method; these runs' methods: {names}")
    asked = [(m, base) for m in names if base and m != base] + pairs
    unknown = sorted({m for pair in asked for m in pair if m not in methods})
    if unknown:
        raise SystemExit(f"no run of method(s) {unknown} among {sorted(methods)}")
    out = table([with_intervals(row, folder) for row, folder in zip(rows, folders, strict=True)])
    if asked:
        out += "\n\n" + paired_table([(f"`{a}` - `{b}`", methods[a], methods[b]) for a, b in asked])
    return out


if __name__ == "__main__":
    print(main(sys.argv[1:]))
