"""Paired comparison of two QA run folders over the questions both answered: the mean of A - B for EM, F1
and cover-acc with its 95 % bootstrap interval (scipy.stats.bootstrap, percentile, 2,000 resamples, seed 0),
and how many answers are identical. This is the check behind the answers rule of docs/models.md: a faster
setting A may become a default where the lower end of its F1 (and EM) interval against the f32 path B is
at least -0.02 on 200 or more questions.

    python benchmarks/paired.py runs/A runs/B [--json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from tandem.eval.intervals import paired_difference
from tandem.eval.runner import read_finished

METRICS = ("em", "f1", "acc")


def compare(a_dir: Path, b_dir: Path) -> dict:
    """A - B over the questions both runs answered without an error."""
    a = {k: v for k, v in read_finished(a_dir / "predictions.jsonl").items() if not v.get("error")}
    b = {k: v for k, v in read_finished(b_dir / "predictions.jsonl").items() if not v.get("error")}
    ids = sorted(set(a) & set(b))
    if not ids:
        raise SystemExit(f"{a_dir} and {b_dir} share no answered question")
    out: dict = {"questions": len(ids), "identical": sum(a[i]["prediction"] == b[i]["prediction"] for i in ids)}
    for metric in METRICS:
        sa, sb = ({i: run[i]["scores"][metric] for i in ids} for run in (a, b))
        diff, low, high = paired_difference(sa, sb)
        out[metric] = {"a": float(np.mean(list(sa.values()))), "b": float(np.mean(list(sb.values()))),
                       "diff": diff, "low": low, "high": high}
    return out


def main(argv: list[str]) -> None:
    args = [x for x in argv if x != "--json"]
    if len(args) != 2:
        raise SystemExit(__doc__)
    result = compare(Path(args[0]), Path(args[1]))
    if "--json" in argv:
        print(json.dumps(result, indent=1))
        return
    print(f"{result['questions']} questions both answered; {result['identical']} identical answers")
    print("| metric | A | B | A - B | 95 % interval |\n|---|---|---|---|---|")
    for metric in METRICS:
        r = result[metric]
        print(f"| {metric} | {r['a']:.3f} | {r['b']:.3f} | {r['diff']:+.3f} | [{r['low']:+.3f}, {r['high']:+.3f}] |")


if __name__ == "__main__":
    main(sys.argv[1:])
