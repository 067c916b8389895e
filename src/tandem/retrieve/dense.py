"""Dense retrieval: encode the query with the index's encoder, search FAISS by inner product."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tandem.index.build import Index
from tandem.retrieve.base import hits_from_arrays
from tandem.types import Hit


class DenseRetriever:
    """Cosine similarity between normalised query and document vectors."""

    name = "dense"

    def __init__(self, index: Index) -> None:
        self.index = index
        self.faiss = index.faiss
        self.encoder = index.encoder
        self.doc_ids = [d.id for d in index.store.docs]

    def search(self, query: str, k: int = 10) -> list[Hit]:
        return self.search_batch([query], k)[0]

    def search_vectors(self, vectors: np.ndarray, k: int = 10) -> list[list[Hit]]:
        """Search with already encoded, normalised query vectors."""
        k = min(k, len(self.doc_ids))
        scores, rows = self.faiss.search(np.ascontiguousarray(vectors, dtype=np.float32), k)
        return [hits_from_arrays(self.doc_ids, r, s, self.name) for r, s in zip(rows, scores, strict=True)]

    def search_batch(self, queries: Sequence[str], k: int = 10) -> list[list[Hit]]:
        if not queries:
            return []
        return self.search_vectors(self.encoder.encode(list(queries)), k)
