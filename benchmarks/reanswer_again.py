"""Re-answer a QA run's predictions with today's re-answer prompt and score them again.

    python benchmarks/reanswer_again.py RUN [RUN ...]        # RUN: a `tandem eval qa --reanswer` folder

For each finished question the recorded prediction is rewritten again by the local model with the prompt
the run used (``reanswer_prompt`` of its config.json, as ``tandem.eval.judge`` words it today), and EM / F1
are taken as the run takes them: the better of the raw prediction and the rewritten answer. Printed per
run: questions, EM / F1 as recorded and again, how many rewritten answers changed, and how many say
yes or no to a question that does not ask yes or no (before and after). The judge is not asked again.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, nargs="+")
    args = parser.parse_args()

    from tandem.eval.judge import reanswer, reanswer_template
    from tandem.eval.qa_metrics import answer_scores
    from tandem.eval.runner import read_finished
    from tandem.llm.local import load_local
    from tandem.methods.answers import asks_yes_or_no

    llm = load_local()
    for run in args.runs:
        config = json.loads((run / "config.json").read_text())
        records = [r for r in read_finished(run / "predictions.jsonl").values() if not r.get("error")]
        template = reanswer_template(config.get("reanswer_prompt", "brief"), [r["golden_answers"] for r in records])
        sums = {"em": 0.0, "f1": 0.0, "em_again": 0.0, "f1_again": 0.0, "changed": 0, "yes_no_before": 0,
                "yes_no_after": 0}
        for rec in records:
            raw = answer_scores(rec["prediction"], rec["golden_answers"])
            again = reanswer(llm, rec["question"], rec["prediction"], template)
            now = answer_scores(again, rec["golden_answers"])
            for metric in ("em", "f1"):
                sums[metric] += rec["scores"][metric]
                sums[f"{metric}_again"] += max(raw[metric], now[metric])
            old = str(rec.get("reanswer") or "")
            sums["changed"] += again != old
            if not asks_yes_or_no(rec["question"]):
                sums["yes_no_before"] += old.strip().lower().rstrip(".") in ("yes", "no")
                sums["yes_no_after"] += again.strip().lower().rstrip(".") in ("yes", "no")
        n = max(len(records), 1)
        print(json.dumps({"run": str(run), "questions": len(records),
                          **{k: round(v / n, 4) if k[:2] in ("em", "f1") else v for k, v in sums.items()}}), flush=True)


if __name__ == "__main__":
    main()
