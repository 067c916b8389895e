"""Replay a DualRAG run's Knowledge Summarizer calls under today's prompt and count what it keeps.

    python benchmarks/summarizer_replay.py RUN --dataset ../shared/data/hotpotqa/dev500.jsonl
    python benchmarks/summarizer_replay.py RUN --dataset D --recorded        # the run's own replies only

RUN is a ``tandem eval qa --method dualrag`` folder. Every summarizer call of its traces is rebuilt from
its live slots (question, reasoning history, entity, keywords, documents) with the prompt of the installed
``tandem.methods.dualrag.prompts`` and sent to the local model (schema-decoded, greedy), so a prompt edit
is measured on the same inputs. Per call it notes whether the documents held a gold passage of the
question (by title) and whether the notes are "None". Printed: calls; the share of None where the documents
held a gold passage (notes lost) and where they held none; the share of notes holding a gold answer where a
gold passage was read; and ``kept``: over the calls whose documents held something to keep - a gold answer
in a document's text, or the title of another gold passage named in a gold passage read (a bridge: the film's
passage names its director, whose passage is gold too) - the share whose notes hold one of those.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llm_work import calls_of  # noqa: E402
from tandem.types import Question  # noqa: E402

# the live section's layouts: documents last (before 2026-11-28) and documents first
LIVE = (re.compile(r"Question: (?P<question>.*?)\nReasoning History:\n(?P<history>.*?)\nEntity: (?P<entity>.*?)\n"
                   r"Keywords: (?P<keywords>.*?)\nDocuments:\n(?P<docs>.*)\nOutput:\s*$", re.S),
        re.compile(r"Documents:\n(?P<docs>.*?)\n\nQuestion: (?P<question>.*?)\nReasoning History:\n(?P<history>.*?)\n"
                   r"Entity: (?P<entity>.*?)\nKeywords: (?P<keywords>.*?)\nOutput:\s*$", re.S))


def live_slots(content: str) -> dict:
    """The slots of a summarizer prompt's "Your turn" section."""
    turn = content.rsplit("## Your turn", 1)[-1]
    match = LIVE[0].search(turn) if turn.lstrip().startswith("Question:") else LIVE[1].search(turn)
    if not match:
        raise ValueError("not a summarizer prompt of this layout")
    docs = []
    for block in re.split(r"(?:^|\n\n)##### ", "\n\n" + match["docs"].strip())[1:]:
        title, _, text = block.partition("\n\n")
        docs.append((title.strip(), text.strip()))
    history = match["history"].strip()
    thoughts = [] if history == "None" else [s.strip() for s in re.split(r"#### Step \d+\n\n", history) if s.strip()]
    return {"question": match["question"].strip(), "thoughts": thoughts, "entity": match["entity"].strip(),
            "keywords": [k.strip() for k in match["keywords"].split(", ")], "docs": docs}


def notes_of(text: str) -> str:
    try:
        notes = json.loads(text).get("notes", "")
    except (json.JSONDecodeError, AttributeError):
        return text
    return " ".join(map(str, notes)) if isinstance(notes, list) else str(notes)  # a list: sentences quoted


def to_keep(docs: list[tuple[str, str]], question: Question, gold_titles: set[str], norm: Callable[[str], str]) -> set[str]:
    """What a call's notes should hold (normalised): each gold answer found in a document's text, and each
    gold title not read in this call that a gold passage read names (the next hop of a bridge)."""
    read = {t for t, _ in docs}
    texts = [norm(x) for _, x in docs]
    wanted = {norm(a) for a in question.answers if norm(a) and any(norm(a) in x for x in texts)}
    gold_texts = [norm(x) for t, x in docs if t in gold_titles]
    for title in gold_titles - read:
        name = norm(title.split(" (")[0])
        if name and any(name in x for x in gold_texts):
            wanted.add(name)
    return wanted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--recorded", action="store_true", help="count the run's own replies, send nothing")
    parser.add_argument("--limit", type=int, default=0, help="first N calls only")
    parser.add_argument("--prompts", type=Path, help="a prompts.py to use instead of the installed one (an "
                        "earlier version, e.g. `git show REV:src/tandem/methods/dualrag/prompts.py > FILE`)")
    parser.add_argument("--concurrency", type=int, default=4, help="calls in flight (the engine batches them)")
    parser.add_argument("--docs", type=int, default=0, help="the first N documents of each call only (the "
                        "reranker's best first), what DualRAG's `--set k=N` sends")
    parser.add_argument("--keep-only", action="store_true", help="only the calls with something to keep "
                        "(the `kept` figure at a fraction of the cost)")
    parser.add_argument("--show", type=int, default=0, help="print N replies where a gold passage was read")
    args = parser.parse_args()

    from tandem.corpus.loaders import load_dataset
    from tandem.eval.qa_metrics import normalize_answer
    from tandem.llm.base import LLMRequest
    from tandem.methods.dualrag import prompts as P
    if args.prompts:
        import importlib.util
        spec = importlib.util.spec_from_file_location("prompts_under_test", args.prompts)
        P = importlib.util.module_from_spec(spec)  # noqa: N806
        spec.loader.exec_module(P)
    from tandem.types import Document

    data = load_dataset(args.dataset)
    titles = {d.id: d.title for d in data.passages}
    by_question = {q.text.strip(): q for q in data.questions}
    calls = [c for c in calls_of(args.run) if c.get("role") == "summarizer"]
    calls = calls[:args.limit] if args.limit else calls
    llm = None if args.recorded else __import__("tandem.llm.local", fromlist=["load_local"]).load_local()
    counts = {"gold": [0, 0, 0], "other": [0, 0, 0]}  # calls, None replies, replies holding a gold answer
    keep = [0, 0]  # calls with something to keep, calls whose notes kept it
    jobs = []
    for call in calls:
        slots = live_slots(call["messages"][-1]["content"])
        q = by_question.get(slots["question"])
        if q is not None:
            gold_titles = {titles[i] for i in q.gold_doc_ids if i in titles}
            if args.docs:
                slots["docs"] = slots["docs"][:args.docs]
            if args.keep_only and not to_keep(slots["docs"], q, gold_titles, normalize_answer):
                continue
            jobs.append((call, slots, q, "gold" if any(t in gold_titles for t, _ in slots["docs"]) else "other"))

    def notes_for(job: tuple) -> str:
        call, slots, _q, _kind = job
        if args.recorded:
            return notes_of(call.get("output") or "")
        docs = [Document(id=str(n), title=t, text=x) for n, (t, x) in enumerate(slots["docs"])]
        messages = P.summarizer_messages(slots["question"], slots["thoughts"], slots["entity"], slots["keywords"], docs)
        req = LLMRequest(messages=messages, max_tokens=P.SUMMARIZER.budget, temperature=0,
                         json_schema=P.SCHEMAS["summarizer"], stop=list(P.SUMMARY_STOP))
        return notes_of(llm.complete(req).text)

    shown = 0
    with ThreadPoolExecutor(args.concurrency) as pool:
        for (_call, slots, q, kind), notes in zip(jobs, pool.map(notes_for, jobs), strict=True):
            norm = normalize_answer(notes)
            row = counts[kind]
            row[0] += 1
            row[1] += notes.strip().lower() in P.NONE_SUMMARIES
            row[2] += any(normalize_answer(a) and normalize_answer(a) in norm for a in q.answers)
            wanted = to_keep(slots["docs"], q, {titles[i] for i in q.gold_doc_ids if i in titles}, normalize_answer)
            if wanted:
                keep[0] += 1
                keep[1] += any(w in norm for w in wanted)
            if kind == "gold" and shown < args.show:
                shown += 1
                print(json.dumps({"question": slots["question"], "entity": slots["entity"], "notes": notes[:300]}))
    for kind, (n, none, answer) in counts.items():
        print(json.dumps({"docs": kind, "calls": n, "none": round(none / max(n, 1), 3),
                          "notes_hold_answer": round(answer / max(n, 1), 3)}), flush=True)
    print(json.dumps({"calls_with_something_to_keep": keep[0], "kept": round(keep[1] / max(keep[0], 1), 3)}))


if __name__ == "__main__":
    main()
