"""The document store inside an index folder: documents in index order, looked up by id."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from tandem.errors import DataError
from tandem.io import write_jsonl_atomic
from tandem.types import Document

DOCS_FILE = "docs.jsonl"


class DocStore:
    """Documents in index order; row i of every vector array belongs to ``docs[i]``."""

    def __init__(self, docs: Sequence[Document]) -> None:
        self.docs = list(docs)
        self.index_of: dict[str, int] = {}
        for i, d in enumerate(self.docs):
            if d.id in self.index_of:
                raise DataError(f"duplicate document id {d.id!r} in the corpus")
            self.index_of[d.id] = i

    def __len__(self) -> int:
        return len(self.docs)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.index_of

    def get(self, doc_id: str) -> Document:
        """The document with this id (KeyError if absent)."""
        return self.docs[self.index_of[doc_id]]

    def save(self, folder: Path) -> None:
        write_jsonl_atomic(folder / DOCS_FILE, (d.to_dict() for d in self.docs))

    @classmethod
    def load(cls, folder: Path) -> DocStore:
        docs = []
        with open(folder / DOCS_FILE, encoding="utf-8") as handle:
            for line in handle:
                rec = json.loads(line)
                docs.append(Document(rec["id"], rec["title"], rec["text"], rec.get("metadata", {})))
        return cls(docs)
