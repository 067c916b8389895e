"""Score a QA run folder's recorded answer replies again with today's answer reading
(``tandem.methods.answers.clean_answer``): what a change of that rule alone does to EM / F1, with no LLM call.
Methods whose answer is the last call's reply (Direct, NativeRAG, Oracle, the baselines' final answers).

    python benchmarks/rescore.py runs/A [runs/B ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

from tandem.eval.qa_metrics import answer_scores
from tandem.eval.runner import read_finished
from tandem.methods.answers import clean_answer


def rescore(folder: Path) -> dict[str, float]:
    """EM / F1 as recorded and as read again, over the run's answered questions."""
    n = 0
    sums = {"em": 0.0, "f1": 0.0, "em_now": 0.0, "f1_now": 0.0, "changed": 0.0}
    for rec in read_finished(folder / "predictions.jsonl").values():
        calls = [c for step in rec["trace"]["steps"] for c in step.get("llm_calls", []) if c["role"] == "answer"]
        if rec.get("error") or not calls:
            continue
        n += 1
        prediction = clean_answer(calls[-1]["output"])
        now = answer_scores(prediction, rec["golden_answers"])
        sums["em"] += rec["scores"]["em"]
        sums["f1"] += rec["scores"]["f1"]
        sums["em_now"] += now["em"]
        sums["f1_now"] += now["f1"]
        sums["changed"] += prediction != rec["prediction"]
    return {"questions": n, **{k: v / max(n, 1) for k, v in sums.items()}}


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit(__doc__)
    print("| run | n | EM recorded | F1 recorded | EM now | F1 now | answers changed |\n|---|---|---|---|---|---|---|")
    for arg in argv:
        r = rescore(Path(arg))
        print(f"| {arg} | {r['questions']} | {r['em']:.3f} | {r['f1']:.3f} | {r['em_now']:.3f} | {r['f1_now']:.3f} "
              f"| {r['changed']:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
