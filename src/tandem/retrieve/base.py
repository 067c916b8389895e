"""The Retriever protocol: a query in, ranked ``Hit``s out; single and batched. ``BatchRetriever``:
the base of retrievers that work in batches (one query is a batch of one)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from tandem.types import Hit


@runtime_checkable
class Retriever(Protocol):
    """Ranks documents of one index for a query."""

    name: str

    def search(self, query: str, k: int = 10) -> list[Hit]:
        """Top-``k`` hits for one query, best first."""
        ...

    def search_batch(self, queries: Sequence[str], k: int = 10) -> list[list[Hit]]:
        """Top-``k`` hits for each query."""
        ...


class BatchRetriever(ABC):
    """A retriever that searches in batches: ``search`` is a batch of one, and an empty batch returns
    no rankings without reaching :meth:`_search_batch`."""

    name: str

    def search(self, query: str, k: int = 10) -> list[Hit]:
        """Top-``k`` hits for one query, best first."""
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int = 10) -> list[list[Hit]]:
        """Top-``k`` hits for each query."""
        return self._search_batch(list(queries), k) if queries else []

    @abstractmethod
    def _search_batch(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Top-``k`` hits for each query of a non-empty batch."""


def hits_from_arrays(doc_ids: Sequence[str], rows: np.ndarray, scores: np.ndarray, source: str) -> list[Hit]:
    """Hits from parallel arrays of row numbers and scores (rows < 0 mark 'no result')."""
    hits: list[Hit] = []
    for row, score in zip(rows.tolist(), scores.tolist(), strict=True):
        if row < 0:
            continue
        hits.append(Hit(doc_ids[row], float(score), len(hits) + 1, source))
    return hits
