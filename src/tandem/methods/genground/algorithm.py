"""GenGround (Shi et al., ACL 2024) as DualRAG runs it (methods.md §3.6):

    pairs <- []
    repeat at most max_iter times:
        (finished, q_i, a_i) <- LLM(question, pairs)          # generate: next sub-question, answered from memory
                                                              # (finished = false while |pairs| < min_iter)
        if finished: break
        docs <- rerank(q_i, retrieve(q_i, candidates))[:k]
        for each batch of `batch` documents:                  # ground
            reply <- LLM(batch, q_i, a_i)                     # JSON {evidence, answer} (ground_format=json)
                                                              # or "<ref>evidence</ref><revise>answer</revise>"
            if reply's evidence is not "Empty": a_i <- revised answer; break
        pairs += (q_i, a_i)
    answer <- LLM(question, pairs)                            # brevity prompt

The generate step is a JSON role under a bounded schema; an unusable plan (after the repair round) ends the
loop and is counted as a fallback. Grounding replies are JSON too by default (``ground_format="json"``,
evidence "Empty" when no document answers); ``"tags"`` is the authors' ``<ref>``/``<revise>`` text, which
SmolLM2 did not write in our runs (every batch then reads as empty). In the paper the generate step always produces a sub-question first and
the loop ends only when the generation is the final answer; so until ``min_iter`` grounded pairs exist the
plan is asked under ``ASK_SCHEMA``, where ``finished`` can only be false and the sub-question is non-empty
(a small model under the open schema answers ``finished: true`` before asking anything). A grounding reply without a ``<ref>`` tag counts as empty and is noted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tandem.errors import ParseError
from tandem.llm.base import LLM, Message
from tandem.llm.jsonparse import parse_json
from tandem.methods.answers import answer_style, brief_answer_messages, clean_answer
from tandem.methods.base import (
    Role,
    Search,
    call_llm,
    call_structured,
    compact_json_examples,
    format_docs,
    mark_exchange,
    search_reranked,
)
from tandem.methods.genground.settings import GenGroundSettings
from tandem.methods.parts import searching_with_reranker
from tandem.registry import METHODS
from tandem.rerank.base import Reranker
from tandem.types import Answer, Document, Question, Step, Trace

PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "finished": {"type": "boolean"},
        "sub_question": {"type": "string", "maxLength": 120},
        "answer": {"type": "string", "maxLength": 80},
    },
    "required": ["finished", "sub_question", "answer"],
}
PLAN = Role("plan", PLAN_SCHEMA, budget=850, prompt_max_tokens=128)  # budget: the schema's worst case (849), so
# the bounds stay 120 / 80 characters (at 160 they shrank to 16 / 11)
# before min_iter grounded pairs: the plan must ask a (non-empty) sub-question
ASK_SCHEMA: dict[str, Any] = {
    **PLAN_SCHEMA,
    "properties": {
        "finished": {"type": "boolean", "enum": [False]},
        "sub_question": {"type": "string", "minLength": 1, "maxLength": 120},
        "answer": {"type": "string", "maxLength": 80},
    },
}
ASK = Role("plan", ASK_SCHEMA, budget=850, prompt_max_tokens=128)

ASK_SYSTEM = compact_json_examples((
    "You answer a complex question by asking simple sub-questions one at a time. Reply with one JSON object on "
    'one line: {"finished": false, "sub_question": "<the next self-contained sub-question>", "answer": "<its '
    'answer from your own knowledge, a few words>"}.'
))
PLAN_SYSTEM = compact_json_examples(
    ASK_SYSTEM + (
    ' When the sub-questions answered so far are enough to answer the question, reply {"finished": true, '
    '"sub_question": "", "answer": ""}.'
))
GROUND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"evidence": {"type": "string", "maxLength": 200}, "answer": {"type": "string", "maxLength": 80}},
    "required": ["evidence", "answer"],
}
GROUND = Role("ground", GROUND_SCHEMA, budget=1150, prompt_max_tokens=128)  # budget: the worst case (1148)
GROUND_JSON_SYSTEM = compact_json_examples((
    "You check an answer against documents. Reply with one JSON object on one line: {\"evidence\": \"<the "
    "sentence of a document that answers the question>\", \"answer\": \"<the answer that sentence supports, a "
    "few words>\"}. If no document answers the question, reply {\"evidence\": \"Empty\", \"answer\": \"\"}."
))
GROUND_SYSTEM = (
    "You check an answer against documents. If a document answers the question, reply "
    "<ref>the sentence that answers it</ref><revise>the answer that sentence supports, a few words</revise>. "
    "If no document answers the question, reply <ref> Empty </ref>."
)
EMPTY = "empty"
_REF = re.compile(r"<ref>(.*?)(?:</ref>|$)", re.IGNORECASE | re.DOTALL)
_REVISE = re.compile(r"<revise>(.*?)(?:</revise>|$)", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class Plan:
    """One generate step: the next sub-question and its answer from memory, or ``finished``."""

    finished: bool
    sub_question: str = ""
    answer: str = ""


def parse_plan(text: str, schema: dict[str, Any] = PLAN_SCHEMA) -> Plan:
    """The generate step's JSON under ``schema`` (``ASK_SCHEMA``: finishing is refused); a plan that is not
    finished must carry a sub-question (else ParseError)."""
    value = parse_json(text, schema)
    plan = Plan(bool(value["finished"]), str(value["sub_question"]).strip(), str(value["answer"]).strip())
    if not plan.finished and not plan.sub_question:
        raise ParseError("an unfinished plan needs a sub_question", raw=text)
    return plan


def parse_ground(text: str) -> tuple[str, str] | None:
    """(evidence, revised answer) from a grounding reply; evidence is "" for ``<ref> Empty </ref>``;
    None when the reply has no ``<ref>`` tag."""
    ref = _REF.search(text)
    if ref is None:
        return None
    evidence = ref.group(1).strip()
    if evidence.lower().strip(" .") == EMPTY:
        return "", ""
    revise = _REVISE.search(text)
    return evidence, clean_answer(revise.group(1)) if revise else ""


def parse_ground_json(text: str) -> tuple[str, str]:
    """(evidence, revised answer) from a JSON grounding reply; evidence is "" for "Empty" (or nothing)."""
    value = parse_json(text, GROUND_SCHEMA)
    evidence = str(value["evidence"]).strip()
    if evidence.lower().strip(" .") in ("", EMPTY):
        return "", ""
    return evidence, clean_answer(str(value["answer"]))


def pairs_text(pairs: Sequence[tuple[str, str]]) -> str:
    """Sub-question-answer pairs, numbered, for a prompt."""
    return "\n".join(f"{i}. {q} -> {a}" for i, (q, a) in enumerate(pairs, 1))


class GenGround:
    """Generate-then-ground: sub-questions answered from memory, each answer revised by retrieved evidence."""

    name = "genground"

    def __init__(self, llm: LLM, search: Search, settings: GenGroundSettings | None = None, *,
                 reranker: Reranker | None = None) -> None:
        s = settings or GenGroundSettings()
        self.llm, self.search, self.reranker = llm, search, reranker
        self.max_iter, self.candidates, self.k, self.batch = s.max_iter, s.candidates, s.k, s.batch
        self.min_iter = s.min_iter
        self.temperature, self.send_schema = s.temperature, s.send_schema
        self.ground_tokens, self.max_tokens, self.ground_format = s.ground_tokens, s.max_tokens, s.ground_format

    def _plan(self, step: Step, question: str, pairs: list[tuple[str, str]]) -> Plan | None:
        done = f"Sub-questions answered so far:\n{pairs_text(pairs)}\n" if pairs else "No sub-question yet.\n"
        ask = len(pairs) < self.min_iter
        step.notes["may_finish"] = not ask
        messages = [Message("system", ASK_SYSTEM if ask else PLAN_SYSTEM),
                    Message("user", f"Question: {question}\n{done}Reply:")]
        role = ASK if ask else PLAN
        plan, _ = call_structured(self.llm, step, role, messages, lambda text: parse_plan(text, role.schema),
                                  temperature=self.temperature, send_schema=self.send_schema,
                                  fallback="stop generating sub-questions")
        return plan

    def _ground(self, trace: Trace, step: Step, plan: Plan, docs: list[Document]) -> str:
        """The first batch whose reply cites evidence revises the answer; the rest are not read."""
        for start in range(0, len(docs), self.batch):
            batch = docs[start:start + self.batch]
            trace.read([d.id for d in batch])
            user = (f"Documents:\n{format_docs(batch)}\nQuestion: {plan.sub_question}\n"
                    f"Answer to check: {plan.answer}\nReply:")
            grounded = self._ground_call(step, user)
            if grounded is None:
                continue
            evidence, revised = grounded
            if evidence:
                step.notes.update(evidence=evidence, grounded_batch=start // self.batch + 1)
                return revised or plan.answer
        step.notes["grounded_batch"] = None
        return plan.answer

    def _ground_call(self, step: Step, user: str) -> tuple[str, str] | None:
        """One grounding call; None (recorded as a fallback) when the reply is unusable."""
        if self.ground_format == "json":
            messages = [Message("system", GROUND_JSON_SYSTEM), Message("user", user)]
            value, _ = call_structured(self.llm, step, GROUND, messages, parse_ground_json, temperature=self.temperature,
                                       send_schema=self.send_schema, fallback="batch taken as empty")
            return value
        reply = call_llm(self.llm, step, "ground", [Message("system", GROUND_SYSTEM), Message("user", user)],
                         max_tokens=self.ground_tokens, temperature=self.temperature)
        grounded = parse_ground(reply)
        mark_exchange(step, "ground", "parsed" if grounded is not None else "fallback", "no <ref> tag; batch taken as empty")
        return grounded

    def answer(self, question: Question) -> Answer:
        trace = Trace()
        pairs: list[tuple[str, str]] = []
        for i in range(self.max_iter):
            step = trace.add(Step(f"iteration {i + 1}"))
            plan = self._plan(step, question.text, pairs)
            if plan is None or plan.finished:
                step.notes["stop"] = "finished" if plan else "no usable plan"
                break
            step.queries.append(plan.sub_question)
            step.hits, docs = search_reranked(self.search, self.reranker, plan.sub_question, self.k,
                                              self.candidates)
            answer = self._ground(trace, step, plan, docs)
            step.notes.update(sub_question=plan.sub_question, generated=plan.answer, answer=answer)
            pairs.append((plan.sub_question, answer))
        final = trace.add(Step("answer"))
        notes = f"Sub-questions and their answers:\n{pairs_text(pairs)}" if pairs else ""
        text = call_llm(self.llm, final, "answer", brief_answer_messages(question.text, notes=notes, style=answer_style(self.llm)),
                        max_tokens=self.max_tokens, temperature=self.temperature)
        return Answer(question.id, clean_answer(text), trace, self.name)


METHODS.register("genground", settings=GenGroundSettings, needs=("index",))(searching_with_reranker("genground", GenGround))
