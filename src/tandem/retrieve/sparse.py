"""BM25 retrieval over an index's bm25s component."""

from __future__ import annotations

from collections.abc import Sequence

from tandem.index.bm25 import tokenize
from tandem.index.build import Index
from tandem.retrieve.base import hits_from_arrays
from tandem.types import Hit


class BM25Retriever:
    """Lexical retrieval: bm25s scores over title + text; documents with score 0 are not returned."""

    name = "bm25"

    def __init__(self, index: Index) -> None:
        self.index = index
        self.model = index.bm25
        self.params = index.manifest.params["bm25"]
        self.doc_ids = [d.id for d in index.store.docs]

    def search(self, query: str, k: int = 10) -> list[Hit]:
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int = 10) -> list[list[Hit]]:
        if not queries:
            return []
        k = min(k, len(self.doc_ids))
        rows, scores = self.model.retrieve(tokenize(queries, self.params), k=k, show_progress=False, n_threads=1)
        out = []
        for r, s in zip(rows, scores, strict=True):
            keep = s > 0
            out.append(hits_from_arrays(self.doc_ids, r[keep], s[keep], self.name))
        return out
