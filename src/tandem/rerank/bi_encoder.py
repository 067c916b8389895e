"""Bi-encoder reranking: cosine between the query and each candidate with the index's encoder.

The offline default where no cross-encoder weights are available: it re-scores candidates that
came from another retriever (BM25, or several keyword queries) against one new query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import Field

from tandem.index.encoder import Encoder
from tandem.index.store import DocStore
from tandem.registry import RERANKERS
from tandem.rerank.base import ranked
from tandem.settings import Settings
from tandem.types import Hit

if TYPE_CHECKING:
    from tandem.index.arrays import Rows


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


class BiEncoderSettings(Settings):
    """Bi-encoder: cosine of query and passage vectors (offline; the index's own encoder by default)."""

    reranker_model: str | None = Field(None, description="another encoder (local folder or hub name); default: "
                                                         "the index's, else the embedded MiniLM")


@RERANKERS.register("bi_encoder", settings=BiEncoderSettings)
def build(s: Any, store: DocStore, index: Any = None) -> BiEncoderReranker:
    """Cosine with the index's encoder, reading the document vectors from the store's exact rows without a copy
    (a flat index or IVF-PQ's re-scoring file; else encoded on the fly); on an index without an encoder, or
    with ``reranker_model`` set, that model or the embedded MiniLM."""
    from tandem.index.encoder import load_encoder
    from tandem.model_files import DEFAULT_ENCODER

    if index is None or index.manifest.encoder is None or s.reranker_model is not None:
        return BiEncoderReranker(load_encoder(s.reranker_model or DEFAULT_ENCODER), store)
    return BiEncoderReranker(index.encoder, store, index.faiss.exact_rows() if index.has("dense") else None)
