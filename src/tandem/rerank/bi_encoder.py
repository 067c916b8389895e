"""Bi-encoder reranking: cosine between the query and each candidate with the index's encoder.

The offline default where no cross-encoder weights are available: it re-scores candidates that
came from another retriever (BM25, or several keyword queries) against one new query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from tandem.index.encoder import Encoder
from tandem.index.store import DocStore
from tandem.rerank.base import ranked
from tandem.types import Hit

if TYPE_CHECKING:
    from tandem.index.vectors import Rows


class BiEncoderReranker:
    """score(q, d) = cos(E(q), E(d)); document vectors come from the vector store's
    exact rows (row-indexable, not copied) when it keeps them, else from the encoder."""

    name = "bi_encoder"

    def __init__(self, encoder: Encoder, store: DocStore, doc_vectors: np.ndarray | Rows | None = None) -> None:
        self.encoder, self.store, self.doc_vectors = encoder, store, doc_vectors

    def _vectors(self, doc_ids: Sequence[str]) -> np.ndarray:
        if self.doc_vectors is not None:
            return self.doc_vectors[[self.store.index_of[d] for d in doc_ids]]
        return self.encoder.encode([self.store.get(d).contents for d in doc_ids])

    def rerank(self, query: str, hits: Sequence[Hit], k: int | None = None) -> list[Hit]:
        if not hits:
            return []
        ids = [h.doc_id for h in hits]
        scores = self._vectors(ids) @ self.encoder.encode([query])[0]
        return ranked(ids, scores.tolist(), self.name, k)
