"""How many questions of each kind a dataset slice holds, by their wording: yes/no (`asks_yes_or_no`), a
choice between two named things (`offers_a_choice`), "what do X and Y share" (both / share / common / same),
and the rest (on HotpotQA, bridge questions).

    python benchmarks/question_kinds.py ../shared/data/hotpotqa/dev500.jsonl --slices 0:250 250:500
"""

from __future__ import annotations

import argparse
from collections import Counter

from tandem.corpus.loaders import load_dataset
from tandem.methods.answers import asks_yes_or_no, offers_a_choice

SHARED_WORDS = ("both", "share", "common", "same")


def kind(question: str) -> str:
    """The kind of ``question`` by its wording."""
    if asks_yes_or_no(question):
        return "yes/no"
    if offers_a_choice(question):
        return "choice"
    return "share" if any(word in question.lower() for word in SHARED_WORDS) else "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset")
    parser.add_argument("--slices", nargs="+", default=["0:"], help="dataset positions START:END")
    args = parser.parse_args()
    questions = [q.text for q in load_dataset(args.dataset).questions]
    for part in args.slices:
        start, _, end = part.partition(":")
        counts = Counter(kind(q) for q in questions[int(start or 0):int(end) if end else None])
        print(part, ", ".join(f"{k} {counts[k]}" for k in ("yes/no", "choice", "share", "other")))


if __name__ == "__main__":
    main()
