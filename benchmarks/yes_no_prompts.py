"""Re-ask the recorded NativeRAG answer prompts of yes/no questions with other answer instructions.

    python benchmarks/yes_no_prompts.py RUN --questions 250:375 [--variants base,swap,strict,reason]

RUN is a NativeRAG run of the 1.5B (`instruction_yes_no` answer style) over dev500; the questions are
those at dataset positions START:END that ask yes or no (``asks_yes_or_no``). Each one's recorded answer
prompt (its retrieved documents and question) is sent again with its last instruction replaced:

- ``base``: "Answer yes or no." (the style's own; a check that the re-ask matches the run),
- ``swap``: "Answer no or yes.",
- ``strict``: "Answer yes only if the documents show it is true; otherwise answer no.",
- ``reason``: a line of facts about each of the two, then the answer marker and yes or no (128 tokens).

Printed per variant: right answers, how many say yes, and seconds (four in flight). Replies are written to
``--keep DIR`` (default ``runs/yes-no-prompts``) as one JSON file a variant.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT.parent / "shared" / "data" / "hotpotqa" / "dev500.jsonl"
BASE = "Answer yes or no.\nAnswer:"


def variants(marker: str) -> dict[str, tuple[str, int]]:
    """Each variant's closing instruction and its answer tokens."""
    return {
        "base": (BASE, 8),
        "swap": ("Answer no or yes.\nAnswer:", 8),
        "strict": ("Answer yes only if the documents show it is true; otherwise answer no.\nAnswer:", 8),
        "reason": ("Think briefly: write one short line with the relevant fact about each of the two, then "
                   f'"{marker}" and yes or no.', 128),
    }


def yes_no_records(run: Path, questions: str) -> tuple[int, int, list[dict]]:
    """START, END and the finished records of ``run`` at dev500 positions ``questions`` ("START:END") whose
    question asks yes or no (shared with ``yes_no_margin.py``)."""
    from tandem.eval.runner import read_finished
    from tandem.methods.answers import asks_yes_or_no

    start, end = (int(x) for x in questions.split(":"))
    with DATASET.open(encoding="utf-8") as fh:
        position = {json.loads(line)["question_id"]: i for i, line in enumerate(fh)}
    records = [r for r in read_finished(run / "predictions.jsonl").values()
               if start <= position.get(r["id"], -1) < end and asks_yes_or_no(r["question"])]
    print(f"{len(records)} yes/no questions among dataset positions {start}-{end - 1}", flush=True)
    return start, end, records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    parser.add_argument("--questions", default="250:375", help="dataset positions START:END")
    parser.add_argument("--variants", default="base,swap,strict,reason")
    parser.add_argument("--keep", type=Path, default=ROOT / "runs" / "yes-no-prompts")
    args = parser.parse_args()

    from tandem.llm.base import LLMRequest, Message
    from tandem.llm.local import load_local
    from tandem.methods.answers import ANSWER_MARKER, clean_answer, reasoned_answer

    start, end, records = yes_no_records(args.run, args.questions)
    table = variants(ANSWER_MARKER)
    llm = load_local()
    args.keep.mkdir(parents=True, exist_ok=True)

    def ask(record: dict, instruction: str, tokens: int) -> tuple[str, str]:
        content = record["trace"]["steps"][-1]["llm_calls"][0]["messages"][-1]["content"]
        if BASE not in content:
            raise SystemExit(f"{record['id']}: the recorded prompt does not end with {BASE!r}")
        head = content.rsplit(BASE, 1)[0]
        reply = llm.complete(LLMRequest(messages=(Message("user", head + instruction),), max_tokens=tokens)).text
        return (reasoned_answer(reply) if tokens > 8 else clean_answer(reply)), reply

    for name in args.variants.split(","):
        instruction, tokens = table[name]
        began = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            outs = list(pool.map(ask, records, [instruction] * len(records), [tokens] * len(records)))
        right = sum(a.strip().lower().startswith(r["golden_answers"][0].lower()) for (a, _), r in zip(outs, records, strict=True))
        says_yes = sum(a.strip().lower().startswith("yes") for a, _ in outs)
        print(f"{name}: right {right}/{len(records)}, says yes {says_yes}, {time.perf_counter() - began:.0f} s",
              flush=True)
        rows = [{"id": r["id"], "gold": r["golden_answers"][0], "answer": a, "reply": reply}
                for (a, reply), r in zip(outs, records, strict=True)]
        (args.keep / f"{name}-{start}-{end}.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
