"""BM25 index files with bm25s (English stop words, Snowball stemming over title + text).

An index is built from a streamed token pass (:class:`BM25Builder`): texts are tokenised batch by
batch with bm25s' own ``Tokenizer`` and their token ids appended to a file, so no text is held.
The score matrix is then computed from that file in chunks of documents with bm25s' own formulas
(:func:`_score_matrix`), holding the vocabulary and the matrix itself (8 bytes per distinct term of
a document) rather than bm25s' one-call build, which also holds every (score, doc, term) triple and
a copy while converting; BM25L and BM25+ (which subtract a non-occurrence score) use that one-call
build. bm25s cannot extend a built index (IDF and the mean document length change with every
document), so adding documents re-runs this pass over all of them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import Stemmer

BM25_DIR = "bm25"
DEFAULT_BM25 = {"k1": 1.5, "b": 0.75, "method": "lucene", "stemmer": "english", "stopwords": "en"}


def _stemmer(name: str | None) -> Any:
    return Stemmer.Stemmer(name) if name else None


def tokenize(texts: Sequence[str], params: dict[str, Any]) -> list[list[str]]:
    """The same tokenisation for documents and queries: lower-case words, stop words out, stems."""
    return bm25s.tokenize(
        list(texts),
        stopwords=params["stopwords"],
        stemmer=_stemmer(params["stemmer"]),
        return_ids=False,
        show_progress=False,
    )


class _TokenRows(Sequence[list[int]]):
    """Per-document token ids read back from the flat file :class:`BM25Builder` wrote."""

    def __init__(self, path: Path, lengths: list[int]) -> None:
        self.ends = np.cumsum(np.asarray(lengths, dtype=np.int64))
        self.ids = np.memmap(path, dtype=np.int32, mode="r") if self.ends[-1] else np.zeros(0, np.int32)

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, i: int) -> list[int]:  # type: ignore[override]
        start = int(self.ends[i - 1]) if i else 0
        return self.ids[start:int(self.ends[i])].tolist()

    def __iter__(self) -> Iterator[list[int]]:
        return (self[i] for i in range(len(self)))


class BM25Builder:
    """A bm25s index built from texts given batch by batch (see the module's note on memory).

    ``add(texts)`` tokenises exactly as :func:`tokenize` does (same words, stop words, stems) and
    appends the ids to ``<work>/.bm25-tokens.bin``; ``save(folder)`` scores and writes ``folder/bm25``
    and removes the token file."""

    def __init__(self, params: dict[str, Any], work: Path) -> None:
        self.params = params
        self.tokenizer = bm25s.tokenization.Tokenizer(stopwords=params["stopwords"], stemmer=_stemmer(params["stemmer"]))
        self.path = work / ".bm25-tokens.bin"
        self.handle = open(self.path, "wb")  # noqa: SIM115 - closed in save()
        self.lengths: list[int] = []

    def add(self, texts: Sequence[str]) -> None:
        """Tokenise ``texts`` (the next documents in index order)."""
        for ids in self.tokenizer.streaming_tokenize(list(texts), allow_empty=False):
            self.handle.write(np.asarray(ids, dtype=np.int32).tobytes())
            self.lengths.append(len(ids))

    def save(self, folder: Path) -> None:
        """Score every document added and save the index under ``folder/bm25``."""
        self.handle.close()
        try:
            model = bm25s.BM25(k1=self.params["k1"], b=self.params["b"], method=self.params["method"])
            vocab = self.tokenizer.get_vocab_dict()
            if model.method in model.methods_requiring_nonoccurrence:  # bm25s' own one-call build
                model.index(bm25s.tokenization.Tokenized(ids=_TokenRows(self.path, self.lengths), vocab=vocab),
                            show_progress=False)
            else:
                model.scores = _score_matrix(model, self.path, np.asarray(self.lengths, dtype=np.int64), len(vocab))
                model.vocab_dict = {**vocab, "": max(vocab.values(), default=-1) + 1} if "" not in vocab else vocab
                model.unique_token_ids_set = set(model.vocab_dict.values())
                model.nonoccurrence_array = None
            model.save(str(folder / BM25_DIR), show_progress=False)
        finally:
            os.unlink(self.path)


def _chunk_pairs(ids: np.ndarray, ends: np.ndarray, lo: int, hi: int, n_vocab: int) -> tuple[np.ndarray, ...]:
    """(document, term, term frequency) of every distinct term of documents ``lo:hi``, by document then term."""
    start = int(ends[lo - 1]) if lo else 0
    tokens = np.asarray(ids[start:int(ends[hi - 1])], dtype=np.int64)
    docs = np.repeat(np.arange(lo, hi, dtype=np.int64), np.diff(ends[lo:hi], prepend=start))
    keys, tf = np.unique(docs * n_vocab + tokens, return_counts=True)
    return keys // n_vocab, keys % n_vocab, tf


def _chunks(ends: np.ndarray, max_tokens: int) -> list[tuple[int, int]]:
    """Consecutive document ranges of at most ``max_tokens`` tokens (at least one document each)."""
    bounds, lo = [], 0
    while lo < len(ends):
        start = int(ends[lo - 1]) if lo else 0
        hi = max(lo + 1, int(np.searchsorted(ends, start + max_tokens, side="right")))
        bounds.append((lo, hi))
        lo = hi
    return bounds


def _score_matrix(model: bm25s.BM25, path: Path, lengths: np.ndarray, n_vocab: int,
                  chunk_tokens: int = 200_000) -> dict[str, Any]:
    """bm25s' score matrix (CSC: a column per term) computed in chunks of documents with bm25s' own
    IDF and term-frequency formulas: two passes over the token file (document frequencies, then
    scores placed column by column), holding the matrix and one chunk's pairs (~100 bytes a token)."""
    from bm25s.scoring import _build_idf_array, _select_idf_scorer, _select_tfc_scorer

    n_docs = len(lengths)
    ends = np.cumsum(lengths)
    ids = np.memmap(path, dtype=np.int32, mode="r") if n_docs and ends[-1] else np.zeros(0, np.int32)
    bounds = _chunks(ends, chunk_tokens)
    df = np.zeros(n_vocab, dtype=np.int64)
    for lo, hi in bounds:
        df += np.bincount(_chunk_pairs(ids, ends, lo, hi, n_vocab)[1], minlength=n_vocab)
    idf = _build_idf_array(dict(enumerate(df.tolist())), n_docs, _select_idf_scorer(model.idf_method), model.dtype)
    tfc = _select_tfc_scorer(model.method)
    avg_len = lengths.mean() if n_docs else 0.0
    indptr = np.concatenate([[0], np.cumsum(df)])
    index_type = np.int32 if indptr[-1] < 2**31 else np.int64
    data, indices = np.empty(int(indptr[-1]), dtype=model.dtype), np.empty(int(indptr[-1]), dtype=index_type)
    cursor = indptr[:-1].copy()
    for lo, hi in bounds:
        docs, terms, tf = _chunk_pairs(ids, ends, lo, hi, n_vocab)
        scores = idf[terms] * tfc(tf_array=tf.astype(model.dtype), l_d=lengths[docs].astype(np.float64), l_avg=avg_len,
                                  k1=model.k1, b=model.b, delta=model.delta)
        order = np.argsort(terms, kind="stable")  # by term, documents still in order within one
        ranked = terms[order]
        slot = cursor[ranked] + np.arange(len(ranked)) - np.searchsorted(ranked, ranked, side="left")
        data[slot], indices[slot] = scores[order], docs[order]
        cursor += np.bincount(terms, minlength=n_vocab)
    return {"data": data, "indices": indices, "indptr": indptr.astype(index_type), "num_docs": n_docs}


def load_bm25(folder: Path, mmap: bool = False) -> bm25s.BM25:
    """Load the saved BM25 model of an index folder."""
    return bm25s.BM25.load(str(folder / BM25_DIR), mmap=mmap, show_progress=False)
