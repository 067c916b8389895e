"""Typed objects shared by every stage: corpus -> index -> retrieve -> method -> eval."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any


def doc_id_for(title: str, text: str) -> str:
    """Stable content id of a passage: the same title+text gets the same id in every dataset."""
    digest = hashlib.sha1(f"{title.strip()}\n{text.strip()}".encode("utf-8")).hexdigest()
    return digest[:16]


@dataclass(frozen=True, slots=True)
class Document:
    """A passage of a corpus."""

    id: str
    title: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def contents(self) -> str:
        """Title and text as one string, the form encoders and BM25 index."""
        return f"{self.title}\n{self.text}" if self.title else self.text

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "title": self.title, "text": self.text}
        if self.metadata:
            out["metadata"] = self.metadata
        return out


@dataclass(frozen=True, slots=True)
class Question:
    """A question with its gold answers and (when the dataset has them) gold passage ids."""

    id: str
    text: str
    answers: tuple[str, ...] = ()
    gold_doc_ids: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "question": self.text,
            "golden_answers": list(self.answers),
            "gold_doc_ids": list(self.gold_doc_ids),
            "metadata": self.metadata,
        }


@dataclass(frozen=True, slots=True)
class Hit:
    """One retrieved document: its id, score, 1-based rank and which retriever produced it."""

    doc_id: str
    score: float
    rank: int
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"doc_id": self.doc_id, "score": self.score, "rank": self.rank, "source": self.source}


@dataclass(frozen=True, slots=True)
class LLMCall:
    """One LLM call inside a method: which role made it, the prompt, the output and its cost."""

    role: str
    messages: tuple[dict[str, str], ...]
    output: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role, "messages": list(self.messages), "output": self.output,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "latency_s": round(self.latency_s, 4), "cached": self.cached,
        }


@dataclass(slots=True)
class Step:
    """One step of a method: the queries it issued, the hits it got, its LLM calls, and notes
    (a thought, an outline snapshot, ...), in the order they happened."""

    name: str
    queries: list[str] = field(default_factory=list)
    hits: list[Hit] = field(default_factory=list)
    llm_calls: list[LLMCall] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "queries": self.queries, "hits": [h.to_dict() for h in self.hits],
            "llm_calls": [c.to_dict() for c in self.llm_calls], "notes": self.notes,
        }


@dataclass(slots=True)
class Trace:
    """Everything a method did for one question."""

    steps: list[Step] = field(default_factory=list)
    docs_read: list[str] = field(default_factory=list)

    def add(self, step: Step) -> Step:
        self.steps.append(step)
        return step

    def read(self, doc_ids: list[str]) -> None:
        """Record documents shown to the LLM (first occurrence order)."""
        for d in doc_ids:
            if d not in self.docs_read:
                self.docs_read.append(d)

    @property
    def llm_calls(self) -> list[LLMCall]:
        return [c for s in self.steps for c in s.llm_calls]

    @property
    def tokens(self) -> int:
        return sum(c.prompt_tokens + c.completion_tokens for c in self.llm_calls)

    def to_dict(self) -> dict[str, Any]:
        return {"steps": [s.to_dict() for s in self.steps], "docs_read": self.docs_read}


@dataclass(slots=True)
class Answer:
    """A method's answer to one question, with the trace that produced it."""

    question_id: str
    text: str
    trace: Trace = field(default_factory=Trace)
    method: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"question_id": self.question_id, "answer": self.text, "method": self.method, "trace": self.trace.to_dict()}
