"""BM25 retrieval over an index's bm25s component."""

from __future__ import annotations

from tandem.index.bm25 import tokenize
from tandem.index.index import Index
from tandem.registry import RETRIEVERS, NoSettings
from tandem.retrieve.base import BatchRetriever, hits_from_arrays
from tandem.types import Hit


class BM25Retriever(BatchRetriever):
    """Lexical retrieval: bm25s scores over title + text; documents with score 0 are not returned."""

    name = "bm25"

    def __init__(self, index: Index) -> None:
        self.index = index
        self.model = index.bm25
        self.params = index.manifest.params["bm25"]
        self.doc_ids = index.store.ids

    def _search_batch(self, queries: list[str], k: int) -> list[list[Hit]]:
        k = min(k, len(self.doc_ids))
        if len(self.model.scores["indptr"]) <= 1:  # no word in any document (all stop words): nothing to find
            return [[] for _ in queries]
        rows, scores = self.model.retrieve(tokenize(queries, self.params), k=k, show_progress=False, n_threads=1)
        out = []
        for r, s in zip(rows, scores, strict=True):
            keep = s > 0
            out.append(hits_from_arrays(self.doc_ids, r[keep], s[keep], self.name))
        return out


@RETRIEVERS.register("bm25", needs=("bm25",), doc="BM25 over the index's sparse part (bm25s)")
def _bm25(index: Index, settings: NoSettings) -> BM25Retriever:
    return BM25Retriever(index)
