"""CoopRAG's prompts, their output formats and their parsers (methods.md §1.2, §1.6; paper App. H).

The prompts paraphrase the authors' (``prompt/unrolling.txt``, ``prompt/Completion/*``) with
shorter invented demonstrations (none from an evaluation set), so a small model's context holds them.
Labels, masks and the answer marker are spelled once here and shared by prompt and parser.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from tandem.errors import ParseError
from tandem.llm.jsonparse import parse_json
from tandem.llm.types import Message
from tandem.methods.base import clean_answer
from tandem.types import Document

UNCERTAIN = "<UNCERTAIN>"
FILL = "<FILL>"
MASKS = (UNCERTAIN, FILL)
HOPS = "Hop Count:"
STRUCTURE = "Reasoning Structure:"
SUBQ = "Sub-questions:"
CHAIN = "Triple Reasoning Chain:"
COMPLETED = "Completed Chain:"
ANSWER = "Answer:"
ANSWER_TAG = "<<FILL>>"  # the authors wrap answers in it; accepted, not required

Triple = tuple[str, str, str]


@dataclass(frozen=True)
class Unrolled:
    """Step (i)'s output: sub-questions and a triple chain with masked entities."""

    sub_questions: tuple[str, ...]
    chain: tuple[Triple, ...]


def render_chain(chain: Sequence[Triple]) -> str:
    """The chain as a JSON list of [head, relation, tail] lists, the form prompts show and parse."""
    return json.dumps([list(t) for t in chain], ensure_ascii=False)


UNROLL_SYSTEM = (
    "You break a question into the steps needed to answer it. Write exactly four lines:\n"
    f"{HOPS} the number of facts needed.\n"
    f"{STRUCTURE} one sentence on how the facts connect, without stating any fact.\n"
    f"{SUBQ} a JSON list of self-contained sub-questions (no pronouns), each answerable with one fact; "
    "for a comparison question add a last sub-question that makes the comparison.\n"
    f"{CHAIN} a JSON list of [head, relation, tail] triples from your own knowledge, with short noun "
    f"phrases. Replace every entity you are not sure of with {UNCERTAIN}. The tail of the last triple "
    f"is {FILL}."
)
UNROLL_DEMOS = (
    ("In which city was the mother of Irène Joliot-Curie born?",
     "2", "Find the mother, then the city where she was born.",
     ["Who was the mother of Irène Joliot-Curie?", "In which city was Marie Curie born?"],
     [["Irène Joliot-Curie", "mother", "Marie Curie"], ["Marie Curie", "born in", FILL]]),
    ("What is the nationality of the director of the film The Silent Harbor?",
     "2", "Find the film's director, then the director's nationality.",
     ["Who directed the film The Silent Harbor?", "What is the nationality of the director of The Silent Harbor?"],
     [["The Silent Harbor", "directed by", UNCERTAIN], [UNCERTAIN, "nationality", FILL]]),
    ("Which was founded first, Oxford University or Harvard University?",
     "3", "Find both founding dates, then compare them.",
     ["When was Oxford University founded?", "When was Harvard University founded?",
      "Which was founded first, Oxford University or Harvard University?"],
     [["Oxford University", "founded in", UNCERTAIN], ["Harvard University", "founded in", "1636"],
      ["Oxford University or Harvard University", "founded first", FILL]]),
)


def _unroll_reply(hops: str, structure: str, subs: Sequence[str], chain: Sequence[Sequence[str]]) -> str:
    return (f"{HOPS} {hops}\n{STRUCTURE} {structure}\n{SUBQ} {json.dumps(list(subs), ensure_ascii=False)}\n"
            f"{CHAIN} {json.dumps([list(t) for t in chain], ensure_ascii=False)}")


def unroll_messages(question: str) -> list[Message]:
    """Step (i): few-shot chat turns, then the question."""
    msgs = [Message("system", UNROLL_SYSTEM)]
    for q, *reply in UNROLL_DEMOS:
        msgs += [Message("user", f"Question: {q}"), Message("assistant", _unroll_reply(*reply))]
    return [*msgs, Message("user", f"Question: {question}")]


_LABELS = (HOPS, STRUCTURE, SUBQ, CHAIN, COMPLETED, ANSWER)


def _section(text: str, label: str) -> str | None:
    """The text after ``label`` up to the next known label (case-insensitive), or None if absent."""
    match = re.search(re.escape(label), text, re.IGNORECASE)
    if match is None:
        return None
    rest = text[match.end():]
    ends = [m.start() for lab in _LABELS if lab != label
            for m in [re.search(r"\n\s*" + re.escape(lab.rstrip(":")), rest, re.IGNORECASE)] if m]
    return rest[: min(ends)] if ends else rest


def parse_triples(text: str) -> tuple[Triple, ...]:
    """A JSON-ish list of [head, relation, tail] lists; items of other lengths are dropped.
    Raises ParseError when no triple is left."""
    value = parse_json(text, {"type": "array"})
    triples = tuple(tuple(str(x).strip() for x in item) for item in value
                    if isinstance(item, list) and len(item) == 3)
    if not triples:
        raise ParseError("no [head, relation, tail] triple in the output", raw=text)
    return triples  # type: ignore[return-value]


def parse_unrolled(text: str) -> Unrolled:
    """Step (i)'s reply -> ``Unrolled``; raises ParseError unless both lists are readable."""
    subs_text = _section(text, SUBQ)
    chain_text = _section(text, CHAIN)
    if subs_text is None or chain_text is None:
        raise ParseError(f"missing {SUBQ!r} or {CHAIN!r} line", raw=text)
    subs = parse_json(subs_text, {"type": "array"})
    sub_questions = tuple(s.strip() for s in subs if isinstance(s, str) and s.strip())
    if not sub_questions:
        raise ParseError("no sub-question in the output", raw=text)
    return Unrolled(sub_questions, parse_triples(chain_text))


def format_documents(docs: Sequence[Document]) -> str:
    """``Document [i] (Title: t) text``, the authors' layout."""
    return "\n".join(f"Document [{i}] (Title: {d.title}) {d.text}" for i, d in enumerate(docs, 1))


def _context(question: str, sub_questions: Sequence[str], docs: Sequence[Document]) -> str:
    subs = "\n".join(f"SUB_Q{i}: {s}" for i, s in enumerate(sub_questions, 1))
    return f"{format_documents(docs)}\n\nMain Question: {question}\n" + (f"{subs}\n" if subs else "")


COMPLETE_SYSTEM = (
    f"You complete a reasoning chain from documents. Replace every {UNCERTAIN} and {FILL} in the "
    "chain with words copied exactly from the documents; add triples if a step is missing. Reply with "
    "the completed chain only, as a JSON list of [head, relation, tail] triples."
)
ANSWER_SYSTEM = (
    "You answer a question from a completed reasoning chain and documents. Give the shortest answer "
    "span, using only words from the chain or the documents: a name, a date, a number or a short "
    f"phrase. If the question asks yes or no, answer yes or no. Reply with one line: {ANSWER} <span>"
)
ONE_CALL_SYSTEM = (
    f"You answer a question from documents. First complete the reasoning chain: replace every {UNCERTAIN} "
    f"and {FILL} with words copied from the documents. Then give the shortest answer span (yes or no "
    f"for a yes/no question). Reply with two lines:\n{COMPLETED} <JSON list of triples>\n{ANSWER} <span>"
)


def complete_messages(question: str, sub_questions: Sequence[str], chain: Sequence[Triple],
                      docs: Sequence[Document]) -> list[Message]:
    """Step (iv): fill the masks from the top-k documents."""
    user = f"{_context(question, sub_questions, docs)}Masked Chain: {render_chain(chain)}\n{COMPLETED}"
    return [Message("system", COMPLETE_SYSTEM), Message("user", user)]


def answer_messages(question: str, sub_questions: Sequence[str], chain: Sequence[Triple],
                    docs: Sequence[Document]) -> list[Message]:
    """Step (v): the answer from question, sub-questions, completed chain and documents."""
    user = f"{_context(question, sub_questions, docs)}{COMPLETED} {render_chain(chain)}\n{ANSWER}"
    return [Message("system", ANSWER_SYSTEM), Message("user", user)]


def one_call_messages(question: str, sub_questions: Sequence[str], chain: Sequence[Triple],
                      docs: Sequence[Document]) -> list[Message]:
    """Steps (iv)+(v) in one call (the paper's Table 18 'unified' variant)."""
    user = f"{_context(question, sub_questions, docs)}Masked Chain: {render_chain(chain)}"
    return [Message("system", ONE_CALL_SYSTEM), Message("user", user)]


def parse_completed(text: str) -> tuple[Triple, ...]:
    """The completed chain of step (iv) (or of the one-call reply); ParseError if unreadable."""
    section = _section(text, COMPLETED)
    return parse_triples(section if section is not None and "[" in section else text)


_OTHER_LABEL = re.compile("|".join(re.escape(lab) for lab in _LABELS if lab != ANSWER), re.IGNORECASE)


def parse_answer(text: str) -> str:
    """The answer span: inside ``<<FILL>>`` tags if present, else after ``Answer:``, else the first line
    that is not another labelled line (a small model may repeat ``Completed Chain: ...`` first)."""
    tagged = re.search(re.escape(ANSWER_TAG) + r"(.*?)" + re.escape(ANSWER_TAG), text, re.DOTALL)
    if tagged:
        return clean_answer(tagged.group(1))
    section = _section(text, ANSWER)
    if section is None:
        section = "\n".join(line for line in text.splitlines() if not _OTHER_LABEL.match(line.strip()))
    return clean_answer(section.replace(ANSWER_TAG, ""))


def chain_answer(chain: Sequence[Triple]) -> str:
    """The tail of the chain's last triple when it is filled (the fallback answer), else ''."""
    return chain[-1][2] if chain and chain[-1][2] not in MASKS else ""


def strip_masks(text: str) -> str:
    """``text`` without mask tokens (for encoders that never learned them)."""
    for mask in MASKS:
        text = text.replace(mask, " ")
    return " ".join(text.split())
