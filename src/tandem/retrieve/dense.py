"""Dense retrieval: encode the query with the index's encoder, search FAISS by inner product."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tandem.index.index import Index
from tandem.registry import RETRIEVERS, NoSettings
from tandem.retrieve.base import BatchRetriever, hits_from_arrays
from tandem.types import Hit


def faiss_hits(faiss: Any, doc_ids: Sequence[str], vectors: np.ndarray, k: int, source: str) -> list[list[Hit]]:
    """Top-``k`` hits of a FAISS inner-product index for each query vector (rows are ``doc_ids``)."""
    scores, rows = faiss.search(np.ascontiguousarray(vectors, dtype=np.float32), min(k, len(doc_ids)))
    return [hits_from_arrays(doc_ids, r, s, source) for r, s in zip(rows, scores, strict=True)]


class DenseRetriever(BatchRetriever):
    """Cosine similarity between normalised query and document vectors."""

    name = "dense"

    def __init__(self, index: Index) -> None:
        self.index = index
        self.faiss = index.faiss
        self.encoder = index.encoder
        self.doc_ids = index.store.ids

    def search_vectors(self, vectors: np.ndarray, k: int = 10) -> list[list[Hit]]:
        """Search with already encoded, normalised query vectors."""
        return faiss_hits(self.faiss, self.doc_ids, vectors, k, self.name)

    def _search_batch(self, queries: list[str], k: int) -> list[list[Hit]]:
        return self.search_vectors(self.encoder.encode(list(queries)), k)


@RETRIEVERS.register("dense", needs=("dense",), doc="inner product over the index's vector store")
def _dense(index: Index, settings: NoSettings) -> DenseRetriever:
    return DenseRetriever(index)
