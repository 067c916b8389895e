"""What every method shares: the Method protocol, a search helper over an index, LLM calls that
land in the trace, and the brevity answer prompt the baselines use."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tandem.index.store import DocStore
from tandem.llm.types import LLM, LLMRequest, Message
from tandem.retrieve.base import Retriever
from tandem.types import Answer, Document, Hit, LLMCall, Question, Step


@runtime_checkable
class Method(Protocol):
    """A QA method: hyper-parameters in the constructor, one question at a time."""

    name: str

    def answer(self, question: Question) -> Answer:
        """Answer one question; the Answer's trace records every query, hit and LLM call."""
        ...


@dataclass
class Search:
    """A retriever plus the store that resolves its hits to documents."""

    retriever: Retriever
    store: DocStore

    def __call__(self, query: str, k: int) -> tuple[list[Hit], list[Document]]:
        hits = self.retriever.search(query, k)
        return hits, [self.store.get(h.doc_id) for h in hits]


def call_llm(llm: LLM, step: Step, role: str, messages: Sequence[Message], **request: object) -> str:
    """Complete ``messages`` and record the call in ``step``; returns the stripped output text."""
    req = LLMRequest(messages=tuple(messages), **request)  # type: ignore[arg-type]
    resp = llm.complete(req)
    step.llm_calls.append(LLMCall(
        role=role, messages=tuple(m.to_dict() for m in req.messages), output=resp.text,
        prompt_tokens=resp.prompt_tokens, completion_tokens=resp.completion_tokens,
        latency_s=resp.latency_s, cached=getattr(resp, "cached", False),
    ))
    return resp.text.strip()


def format_docs(docs: Sequence[Document]) -> str:
    """Documents numbered for a prompt: ``[1] Title: text``."""
    return "\n".join(f"[{i}] {d.title}: {d.text}" if d.title else f"[{i}] {d.text}" for i, d in enumerate(docs, 1))


BRIEF_SYSTEM = (
    "You answer questions as briefly as possible: a name, a date, a number or a short phrase, "
    "never a full sentence and never an explanation. If the question asks yes or no, answer "
    "'yes' or 'no'."
)


def brief_answer_messages(question: str, docs: Sequence[Document] = (), notes: str = "") -> list[Message]:
    """The answer prompt shared by Direct, NativeRAG, Oracle and IRCoT's fallback answer."""
    parts = []
    if docs:
        parts.append("Use these documents to answer.\n" + format_docs(docs))
    if notes:
        parts.append(notes)
    parts.append(f"Question: {question}\nAnswer:")
    return [Message("system", BRIEF_SYSTEM), Message("user", "\n\n".join(parts))]


_LABEL = re.compile(r"^\s*(?:(?:so\s+)?the answer is|final answer|answer|a)\s*:\s*", re.IGNORECASE)


def clean_answer(text: str) -> str:
    """The first line of a short answer, without a leading 'Answer:' label or trailing period."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    line = _LABEL.sub("", line)
    return line.strip().rstrip(".").strip()
