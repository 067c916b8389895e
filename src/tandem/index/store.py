"""The document store inside an index folder: documents in index order, looked up by id.

A folder built by this version holds ``docs.jsonl`` and ``docs.offsets.npy`` (the byte offset of
every line, one more for the end of the file): :meth:`DocStore.load` then memory-maps both and
parses a document only when it is asked for, so a store of millions of passages costs a few bytes
per document until ``index_of`` (id -> row, built on first use) is needed. Older folders without
the offsets are read whole, as before.
"""

from __future__ import annotations

import json
import mmap
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, overload

import numpy as np

from tandem.errors import DataError
from tandem.io import atomic_open
from tandem.types import Document

DOCS_FILE = "docs.jsonl"
OFFSETS_FILE = "docs.offsets.npy"


def doc_line(doc: Document) -> bytes:
    """The ``docs.jsonl`` line of a document (UTF-8, newline-terminated)."""
    return (json.dumps(doc.to_dict(), ensure_ascii=False) + "\n").encode("utf-8")


def parse_doc(line: bytes | str) -> Document:
    """The document of one ``docs.jsonl`` line."""
    rec = json.loads(line)
    return Document(rec["id"], rec["title"], rec["text"], rec.get("metadata", {}))


class DocsWriter:
    """Appends ``docs.jsonl`` lines to an open binary file and records their offsets."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle
        self.offsets = array("q", [0])  # 8 bytes a document (a list of ints costs ~36)

    def write_lines(self, lines: Iterable[bytes]) -> None:
        for line in lines:
            self.handle.write(line)
            self.offsets.append(self.offsets[-1] + len(line))

    def save_offsets(self, folder: Path) -> None:
        np.save(folder / OFFSETS_FILE, np.frombuffer(self.offsets, dtype=np.int64))


class DiskDocs(Sequence[Document]):
    """``docs.jsonl`` read through its offset index: row ``i`` is parsed when asked for."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / DOCS_FILE
        self.offsets = np.load(folder / OFFSETS_FILE, mmap_mode="r")
        size = self.path.stat().st_size
        if len(self.offsets) < 2 or int(self.offsets[-1]) != size:
            raise DataError(f"{OFFSETS_FILE} does not match {DOCS_FILE} ({size} bytes)", str(folder))
        with open(self.path, "rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, i: int) -> Document: ...
    @overload
    def __getitem__(self, i: slice) -> list[Document]: ...
    def __getitem__(self, i: int | slice) -> Document | list[Document]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"document row {i} out of range ({n} documents)")
        i %= n
        return parse_doc(self._map[int(self.offsets[i]):int(self.offsets[i + 1])])

    def __iter__(self) -> Iterator[Document]:
        with open(self.path, "rb") as handle:
            for line in handle:
                yield parse_doc(line)


class DocStore:
    """Documents in index order; row i of every vector array belongs to ``docs[i]``."""

    def __init__(self, docs: Sequence[Document]) -> None:
        """``docs`` in memory (a duplicate id is an error at once) or a :class:`DiskDocs` (ids indexed
        on first lookup)."""
        self.docs: Sequence[Document] = docs if isinstance(docs, DiskDocs) else list(docs)
        self._ids: list[str] | None = None
        self._index_of: dict[str, int] | None = None
        if not isinstance(docs, DiskDocs):
            self._index_of = index_ids(self.docs)

    @property
    def ids(self) -> list[str]:
        """Document ids in row order, read once (a :class:`DiskDocs` store parses every line for them)
        and shared by every retriever over the store."""
        if self._ids is None:
            self._ids = [d.id for d in self.docs]
        return self._ids

    @property
    def index_of(self) -> dict[str, int]:
        """Document id -> row."""
        if self._index_of is None:
            self._index_of = _rows_of(self.ids)
        return self._index_of

    def __len__(self) -> int:
        return len(self.docs)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.index_of

    def get(self, doc_id: str) -> Document:
        """The document with this id (KeyError if absent)."""
        return self.docs[self.index_of[doc_id]]

    def save(self, folder: Path) -> None:
        """Write ``docs.jsonl`` and its offsets into ``folder``."""
        with atomic_open(folder / DOCS_FILE, "wb") as handle:
            writer = DocsWriter(handle)
            writer.write_lines(doc_line(d) for d in self.docs)
        writer.save_offsets(folder)

    @classmethod
    def load(cls, folder: Path) -> DocStore:
        """The store of an index folder: memory-mapped when it has an offset index, else read whole."""
        if (folder / OFFSETS_FILE).exists():
            return cls(DiskDocs(folder))
        with open(folder / DOCS_FILE, encoding="utf-8") as handle:
            return cls([parse_doc(line) for line in handle])


def index_ids(docs: Iterable[Document]) -> dict[str, int]:
    """Document id -> row; a DataError names the first id found twice."""
    return _rows_of(d.id for d in docs)


def _rows_of(ids: Iterable[str]) -> dict[str, int]:
    index: dict[str, int] = {}
    for i, doc_id in enumerate(ids):
        if doc_id in index:
            raise DataError(f"duplicate document id {doc_id!r} in the corpus (rows {index[doc_id]} and {i})")
        index[doc_id] = i
    return index
