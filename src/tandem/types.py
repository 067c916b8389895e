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
