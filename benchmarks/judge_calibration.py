"""Calibrate a yes/no judge on dev500's own gold answers against wrong ones (another question's gold answer)
before its column is trusted (:func:`tandem.eval.judge.calibrate_judge`). Prints JSON: accuracy, Yes rates
on gold and on wrong answers, calls and seconds.

    python benchmarks/judge_calibration.py [--judge local] [--questions 100]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tandem.corpus import load_dataset
from tandem.eval.judge import calibrate_judge
from tandem.llm import load_llm

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "hotpotqa" / "dev500.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--judge", default="local", help="LLM spec of the judge")
    parser.add_argument("--questions", type=int, default=100, help="the first N dev500 questions")
    parser.add_argument("--cache", default=None, help="SQLite response cache (resumes an interrupted run)")
    args = parser.parse_args()
    questions = load_dataset(DATA).questions[: args.questions]
    llm = load_llm(args.judge, **({"cache": Path(args.cache)} if args.cache else {}))
    t0 = time.perf_counter()
    result = calibrate_judge(llm, [(q.text, q.answers) for q in questions], limit=args.questions)
    result.update(judge=args.judge, questions=len(questions), seconds=round(time.perf_counter() - t0, 1))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
