"""Seed a run folder with the judge's replies of earlier runs of the same LLM, so that its calibration
(the same gold / other-gold pairs in every run on a dataset) asks nothing again.

    python benchmarks/seed_judge.py OUT RUN [RUN ...]

OUT is created as a tandem run folder if absent (an existing one must be tandem's); each RUN's
``llm-cache.sqlite`` gives its judge replies (requests holding the judge prompt's question), added to
OUT's cache where OUT has none of them yet. Replies are keyed by backend, model and the whole request,
so only the same LLM asked the same thing reads them; a run's own answers are not copied. On the
AVX2 machine an unseeded MuSiQue calibration took 22 min after the last answer, a seeded one under a
second (docs/methods/comparison.md). ``benchmarks/paper_table.sh`` calls it before each method's run.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

from tandem.errors import ConfigError
from tandem.eval.judge import JUDGE_PROMPT
from tandem.eval.run import RESPONSE_CACHE as CACHE
from tandem.llm import copy_responses
from tandem.outdir import claim_dir

# the judge prompt's fixed question: in every judge request, in no other role's
MARK = JUDGE_PROMPT.split("\n\n", 1)[1].split("?", 1)[0] + "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the run folder to seed")
    parser.add_argument("runs", type=Path, nargs="+", help="earlier run folders of the same LLM")
    args = parser.parse_args()
    try:
        out = claim_dir(args.out, "qa-run")
    except (ConfigError, OSError) as exc:
        sys.exit(f"seed_judge: {exc}")
    for run in args.runs:
        if run.resolve() == out.resolve() or not (run / CACHE).is_file():
            continue
        try:
            added = copy_responses(run / CACHE, out / CACHE, MARK)
        except (OSError, sqlite3.Error) as exc:  # a damaged cache seeds nothing; the run computes those replies
            print(f"seed_judge: {run / CACHE} or {out / CACHE} not read: {exc}; skipped", file=sys.stderr)
            continue
        print(f"{out}: {added} judge replies from {run}")


if __name__ == "__main__":
    main()
