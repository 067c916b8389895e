"""CoopRAG's prompts, their output formats and their parsers (methods.md §1.2, §1.6; paper App. H).

The prompts paraphrase the authors' (``prompt/unrolling.txt``, ``prompt/Completion/*``) with
shorter invented demonstrations (none from an evaluation set), so a small model's context holds them.
Unrolling, completion and the one-call variant reply in JSON under bounded schemas (the structured
roles ``UNROLL``, ``COMPLETE``, ``ONE_CALL``); the answer step replies in text. Masks and the answer
marker are spelled once here and shared by prompt and parser.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tandem.errors import ParseError
from tandem.llm.base import Message
from tandem.llm.jsonparse import parse_json
from tandem.methods.answers import BRIEF_INSTRUCTION, YES_NO_INSTRUCTION, asks_yes_or_no, clean_answer
from tandem.methods.base import Role, compact_json_examples
from tandem.types import Document

UNCERTAIN = "<UNCERTAIN>"
FILL = "<FILL>"
MASKS = (UNCERTAIN, FILL)
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
    return json.dumps([list(t) for t in chain], ensure_ascii=False, separators=(",", ":"))


_PHRASE: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": 48}
TRIPLE_SCHEMA: dict[str, Any] = {"type": "array", "minItems": 3, "maxItems": 3, "items": _PHRASE}
UNROLL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "hop_count": {"type": "integer", "minimum": 1, "maximum": 9},
        "structure": {"type": "string", "minLength": 1, "maxLength": 120},
        "sub_questions": {"type": "array", "minItems": 1, "maxItems": 4,
                          "items": {"type": "string", "minLength": 1, "maxLength": 100}},
        "chain": {"type": "array", "minItems": 1, "maxItems": 4, "items": TRIPLE_SCHEMA},
    },
    "required": ["hop_count", "structure", "sub_questions", "chain"],
}
COMPLETE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"chain": {"type": "array", "minItems": 1, "maxItems": 6, "items": TRIPLE_SCHEMA}},
    "required": ["chain"],
}
ONE_CALL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {**COMPLETE_SCHEMA["properties"], "answer": {"type": "string", "minLength": 1, "maxLength": 60}},
    "required": ["chain", "answer"],
}
# structured roles: schema, token budget (max_tokens of a grammar-decoded reply), prompt-only cap
UNROLL = Role("unroll", UNROLL_SCHEMA, budget=4608, prompt_max_tokens=256)
COMPLETE = Role("complete", COMPLETE_SCHEMA, budget=3584, prompt_max_tokens=192)
ONE_CALL = Role("one_call", ONE_CALL_SCHEMA, budget=3840, prompt_max_tokens=224)

UNROLL_SYSTEM = compact_json_examples((
    "You break a question into the steps needed to answer it. Reply with one JSON object on one line:\n"
    '{"hop_count": <the number of facts needed>, "structure": "<one sentence on how the facts connect, '
    'without stating any fact>", "sub_questions": [<self-contained sub-questions (no pronouns), each '
    'answerable with one fact; for a comparison question a last one that makes the comparison>], '
    '"chain": [<[head, relation, tail] triples from your own knowledge, short noun phrases>]}\n'
    f"In the chain, replace every entity you are not sure of with {UNCERTAIN}. The tail of the last "
    f"triple is {FILL}."
))
UNROLL_DEMOS = (
    ("In which city was the mother of Irène Joliot-Curie born?",
     2, "Find the mother, then the city where she was born.",
     ["Who was the mother of Irène Joliot-Curie?", "In which city was Marie Curie born?"],
     [["Irène Joliot-Curie", "mother", "Marie Curie"], ["Marie Curie", "born in", FILL]]),
    ("What is the nationality of the director of the film The Silent Harbor?",
     2, "Find the film's director, then the director's nationality.",
     ["Who directed the film The Silent Harbor?", "What is the nationality of the director of The Silent Harbor?"],
     [["The Silent Harbor", "directed by", UNCERTAIN], [UNCERTAIN, "nationality", FILL]]),
    ("Which was founded first, Oxford University or Harvard University?",
     3, "Find both founding dates, then compare them.",
     ["When was Oxford University founded?", "When was Harvard University founded?",
      "Which was founded first, Oxford University or Harvard University?"],
     [["Oxford University", "founded in", UNCERTAIN], ["Harvard University", "founded in", "1636"],
      ["Oxford University or Harvard University", "founded first", FILL]]),
)


def _js(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))  # as constrained decoding writes it


def _unroll_reply(hops: int, structure: str, subs: Sequence[str], chain: Sequence[Sequence[str]]) -> str:
    return _js({"hop_count": hops, "structure": structure, "sub_questions": list(subs), "chain": [list(t) for t in chain]})


def unroll_messages(question: str) -> list[Message]:
    """Step (i): few-shot chat turns, then the question."""
    msgs = [Message("system", UNROLL_SYSTEM)]
    for q, *reply in UNROLL_DEMOS:
        msgs += [Message("user", f"Question: {q}"), Message("assistant", _unroll_reply(*reply))]
    return [*msgs, Message("user", f"Question: {question}")]


def _triples(value: Any, raw: str) -> tuple[Triple, ...]:
    triples = tuple(tuple(str(x).strip() for x in item) for item in value
                    if isinstance(item, list) and len(item) == 3) if isinstance(value, list) else ()
    if not triples:
        raise ParseError("no [head, relation, tail] triple in the output", raw=raw)
    return triples  # type: ignore[return-value]


def parse_triples(text: str) -> tuple[Triple, ...]:
    """A JSON-ish list of [head, relation, tail] lists (or an object holding one as ``chain``); items of
    other lengths are dropped. Raises ParseError when no triple is left."""
    value = parse_json(text)
    return _triples(value.get("chain") if isinstance(value, dict) else value, text)


def parse_unrolled(text: str) -> Unrolled:
    """Step (i)'s JSON reply -> ``Unrolled``; raises ParseError unless sub-questions and chain are readable."""
    value = parse_json(text, {"type": "object"})
    subs = value.get("sub_questions")
    sub_questions = tuple(s.strip() for s in subs if isinstance(s, str) and s.strip()) if isinstance(subs, list) else ()
    if not sub_questions:
        raise ParseError("no sub-question in the output", raw=text)
    return Unrolled(sub_questions, _triples(value.get("chain"), text))


def format_documents(docs: Sequence[Document]) -> str:
    """``Document [i] (Title: t) text``, the authors' layout."""
    return "\n".join(f"Document [{i}] (Title: {d.title}) {d.text}" for i, d in enumerate(docs, 1))


def _context(question: str, sub_questions: Sequence[str], docs: Sequence[Document]) -> str:
    subs = "\n".join(f"SUB_Q{i}: {s}" for i, s in enumerate(sub_questions, 1))
    return f"{format_documents(docs)}\n\nMain Question: {question}\n" + (f"{subs}\n" if subs else "")


COMPLETE_SYSTEM = compact_json_examples((
    f"You complete a reasoning chain from documents. Replace every {UNCERTAIN} and {FILL} in the "
    "chain with words copied exactly from the documents; add triples if a step is missing. Reply with "
    'one JSON object on one line: {"chain": [<the completed [head, relation, tail] triples>]}'
))
ANSWER_SYSTEM = (
    "You answer a question from a completed reasoning chain and documents. Give the shortest answer "
    "span, using only words from the chain or the documents: a name, a date, a number or a short "
    f"phrase. If the question asks yes or no, answer yes or no. Reply with one line: {ANSWER} <span>"
)
#: the instruction styles of :func:`tandem.methods.answers.answer_style` (the 1.5B's): the system prompt does not
#: name yes or no - said there, Qwen2.5-Coder-1.5B answered "Yes" to 28 of 126 dev500 bridge questions, none
#: of which asks yes or no - and the user turn ends with the brief instruction, or "Answer yes or no." where
#: the question asks it (``instruction_yes_no``)
ANSWER_SYSTEM_BRIEF = (
    "You answer a question from a completed reasoning chain and documents. Give the shortest answer "
    f"span, using only words from the chain or the documents. Reply with one line: {ANSWER} <span>"
)
ONE_CALL_SYSTEM = compact_json_examples((
    f"You answer a question from documents. First complete the reasoning chain: replace every {UNCERTAIN} "
    f"and {FILL} with words copied from the documents. Then give the shortest answer span (yes or no "
    'for a yes/no question). Reply with one JSON object on one line: {"chain": [<the completed '
    '[head, relation, tail] triples>], "answer": "<span>"}'
))


#: ``shared_context``: one system message for steps (iv) and (v), each call's task named after the context
SHARED_SYSTEM = ("You work on a question from documents in two turns. When the last line starts with "
                 f"'Masked Chain:': {COMPLETE_SYSTEM}\nWhen the message ends with '{ANSWER}': {ANSWER_SYSTEM}")
SHARED_SYSTEM_BRIEF = SHARED_SYSTEM.replace(ANSWER_SYSTEM, ANSWER_SYSTEM_BRIEF)


def _answer_system(style: str, shared: bool) -> str:
    """The answer's system prompt for an answer style (``system``: the paper's wording, yes/no named)."""
    if style == "system":
        return SHARED_SYSTEM if shared else ANSWER_SYSTEM
    return SHARED_SYSTEM_BRIEF if shared else ANSWER_SYSTEM_BRIEF


def complete_messages(question: str, sub_questions: Sequence[str], chain: Sequence[Triple],
                      docs: Sequence[Document], shared: bool = False, style: str = "system") -> list[Message]:
    """Step (iv): fill the masks from the top-k documents (``shared``: under :data:`SHARED_SYSTEM`, or
    :data:`SHARED_SYSTEM_BRIEF` for an instruction ``style``)."""
    user = f"{_context(question, sub_questions, docs)}Masked Chain: {render_chain(chain)}"
    return [Message("system", _answer_system(style, True) if shared else COMPLETE_SYSTEM), Message("user", user)]


def answer_messages(question: str, sub_questions: Sequence[str], chain: Sequence[Triple],
                    docs: Sequence[Document], shared: bool = False, style: str = "system") -> list[Message]:
    """Step (v): the answer from question, sub-questions, completed chain and documents (``shared``: under the
    shared system prompt, so that the prompt begins as step (iv)'s did, documents included). ``style`` is the
    model's answer style (:func:`tandem.methods.answers.answer_style`): ``system`` names yes/no in the system
    prompt; ``instruction`` ends the user turn with the brief instruction, ``instruction_yes_no`` with "Answer
    yes or no." where the question asks it (:func:`tandem.methods.answers.asks_yes_or_no`)."""
    head = f"{_context(question, sub_questions, docs)}{COMPLETED} {render_chain(chain)}\n"
    if style != "system":
        verdict = style == "instruction_yes_no" and asks_yes_or_no(question)
        head += f"{YES_NO_INSTRUCTION if verdict else BRIEF_INSTRUCTION}\n"
    return [Message("system", _answer_system(style, shared)), Message("user", head + ANSWER)]


def one_call_messages(question: str, sub_questions: Sequence[str], chain: Sequence[Triple],
                      docs: Sequence[Document]) -> list[Message]:
    """Steps (iv)+(v) in one call (the paper's Table 18 'unified' variant)."""
    user = f"{_context(question, sub_questions, docs)}Masked Chain: {render_chain(chain)}"
    return [Message("system", ONE_CALL_SYSTEM), Message("user", user)]


def parse_completed(text: str) -> tuple[Triple, ...]:
    """The completed chain of step (iv) (or of the one-call reply); ParseError if unreadable."""
    return parse_triples(text)


def parse_one_call(text: str) -> tuple[tuple[Triple, ...], str]:
    """The one-call reply -> (completed chain, answer span); ParseError if either is missing."""
    value = parse_json(text, {"type": "object"})
    answer = value.get("answer")
    if not isinstance(answer, str) or not clean_answer(answer):
        raise ParseError("no string 'answer'", raw=text)
    return _triples(value.get("chain"), text), clean_answer(answer)


_ANSWER = re.compile(re.escape(ANSWER), re.IGNORECASE)
_OTHER_LABEL = re.compile(re.escape(COMPLETED) + r"|[\[{]", re.IGNORECASE)


def parse_answer(text: str) -> str:
    """The answer span: inside ``<<FILL>>`` tags if present, else after ``Answer:``, else the first line
    that is not another labelled line (a small model may repeat ``Completed Chain: ...`` first)."""
    tagged = re.search(re.escape(ANSWER_TAG) + r"(.*?)" + re.escape(ANSWER_TAG), text, re.DOTALL)
    if tagged:
        return clean_answer(tagged.group(1))
    found = _ANSWER.search(text)
    if found is not None:
        section = text[found.end():]
    else:
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
