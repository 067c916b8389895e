"""RaLa, Ranking by contrasting Layers (CoopRAG, Ko et al. NeurIPS 2025, §3.4; methods.md §1.4).

Notation: the query U has last-layer token vectors q_1..q_m and sentence vector q_0 (see
``tandem.index.layers`` for the two definitions of the "[CLS]" vector: ``mean`` or ``cls``); a
document D has token vectors d_j^(l) and sentence vector d_0^(l) at hidden state l; L is the last
layer, C a set of earlier ("premature") layers; every vector is unit-norm, so <.,.> is cosine.

- Eq. 4 (``variant="eq4"``, the paper's reported setting)::

      score(U, D) = w(U, D) * avg_i max_j <q_i, d_j^(L)>            (ColBERT average MaxSim)
      w(U, D)     = <q_0, d_0^(L)> - min_{l in C} <q_0, d_0^(l)>      (gap-aware weight)

- Eq. 3 (``variant="eq3"``): score(U, D) = avg_i max_j max_{l in C} (<q_i, d_j^(L)> - <q_i, d_j^(l)>).
  It needs every layer's document token vectors, which are not stored: candidates are encoded at
  query time (~4-5 s per 100 candidates on a shared 2-core CPU).

Document punctuation tokens count as zero vectors (similarity 0), as in the authors' code; query
tokens are all kept (special tokens included). ``omega=False`` drops the weight (paper Table 5,
"without w"). The authors' code also halves w; a constant factor, so rankings do not change.
Their released evaluation rerank is a no-op (methods.md §1.4); this is the paper's formula.

``fuse="none"`` ranks by the score alone (the paper). ``fuse="rrf"`` (default) ranks by reciprocal-
rank fusion of the first stage's order and RaLa's, 1/(c + rank_first) + 1/(c + rank_rala), c = 60: with
an encoder not trained for RaLa (MiniLM off the shelf) the score alone loses the first stage's
precision at rank 2 and, after a hybrid first stage, its BM25 evidence (docs/methods/cooprag.md).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from tandem.errors import ConfigError
from tandem.index.index import Index
from tandem.index.layers import CLS_MODES, EXTRA_PREFIX, LayerEncoder, LayerFeatures
from tandem.index.store import DocStore
from tandem.rerank.base import ranked
from tandem.retrieve.base import BatchRetriever
from tandem.retrieve.dense import faiss_hits
from tandem.retrieve.hybrid import rrf_scores
from tandem.types import Hit

VARIANTS = ("eq4", "eq3")
FUSIONS = ("rrf", "none")
# Settings for MiniLM-L6 (hidden states 0..6), chosen on dev500 questions 250-499 and reported on 0-249
# (docs/methods/cooprag.md): C = {3} (the middle layer; one layer per bucket, {0, 2, 4} like the
# authors' [0, 4, 7] of 12, scored lower); "mean" sentence vectors (the real [CLS] state of this
# mean-pooled model scored far lower); RaLa's ranking fused with the first stage's by RRF.
DEFAULT_LAYERS: tuple[int, ...] = (3,)
DEFAULT_CLS = "mean"
DEFAULT_FUSE = "rrf"


def gap_weight(q_cls: np.ndarray, d_layers: np.ndarray, last: int, candidates: Sequence[int]) -> np.ndarray:
    """w(U, D) = <q_0, d_0^(L)> - min_{l in C} <q_0, d_0^(l)> for each document (Eq. 4).

    ``q_cls`` (dim,) is the query's last-layer sentence vector, ``d_layers`` (n, L+1, dim) the
    documents' per-layer sentence vectors; returns (n,).
    """
    sims = np.asarray(d_layers, dtype=np.float32) @ np.asarray(q_cls, dtype=np.float32)
    return sims[:, last] - sims[:, list(candidates)].min(axis=1)


def _similarities(q: np.ndarray, d: np.ndarray) -> np.ndarray:
    """(m, T) float32 cosines of unit rows. fp16 document vectors (as stored) are multiplied in fp16 by
    torch: on CPU that is ~4x faster than converting them to fp32 first (results agree to ~1e-3)."""
    if d.dtype == np.float16:
        import torch

        q16 = torch.from_numpy(np.ascontiguousarray(q, dtype=np.float16))
        return (q16 @ torch.from_numpy(np.ascontiguousarray(d)).T).float().numpy()
    return np.asarray(q, dtype=np.float32) @ np.asarray(d, dtype=np.float32).T


def _per_doc_mean_max(sims: np.ndarray, offsets: np.ndarray, punct: np.ndarray) -> np.ndarray:
    """avg over query rows of the max over each document's columns; punctuation columns count as 0."""
    sims[:, punct] = 0.0
    return np.maximum.reduceat(sims, offsets[:-1], axis=1).mean(axis=0)


def avg_maxsim(q_tok: np.ndarray, d_tok: np.ndarray, offsets: np.ndarray, punct: np.ndarray) -> np.ndarray:
    """ColBERT average MaxSim, avg_i max_j <q_i, d_j>, for each document.

    ``d_tok`` (T, dim) holds the documents' token vectors back to back, document i at rows
    ``offsets[i]:offsets[i+1]`` (each non-empty); ``punct`` (T,) marks tokens scored as 0. Returns (n,).
    """
    return _per_doc_mean_max(_similarities(q_tok, d_tok), offsets, np.asarray(punct, dtype=bool))


def token_gap_score(q_tok: np.ndarray, d_layer_tok: np.ndarray, offsets: np.ndarray, punct: np.ndarray,
                    last: int, candidates: Sequence[int]) -> np.ndarray:
    """Eq. 3: avg_i max_j max_{l in C} (<q_i, d_j^(L)> - <q_i, d_j^(l)>); ``d_layer_tok`` is (T, L+1, dim)."""
    q = np.asarray(q_tok, dtype=np.float32)
    d = np.asarray(d_layer_tok, dtype=np.float32)
    early = np.min([q @ d[:, layer].T for layer in candidates], axis=0)
    return _per_doc_mean_max(q @ d[:, last].T - early, offsets, np.asarray(punct, dtype=bool))


class StoredFeatures:
    """RaLa's document features from an index folder's extras (memory-mapped; see ``tandem.index.layers``)."""

    def __init__(self, index: Index) -> None:
        self.row_of = index.store.index_of
        self.sentence = {mode: index.extra(f"{EXTRA_PREFIX}_{mode}") for mode in CLS_MODES}
        self.tokens = index.extra(f"{EXTRA_PREFIX}_tokens")
        self.offsets = np.asarray(index.extra(f"{EXTRA_PREFIX}_offsets"))
        self.punct = np.asarray(index.extra(f"{EXTRA_PREFIX}_punct"), dtype=bool)

    @staticmethod
    def available(index: Index) -> bool:
        """Whether ``index`` was built with ``--extras rala``."""
        return f"{EXTRA_PREFIX}_tokens" in index.manifest.extras

    def gather(self, doc_ids: Sequence[str], mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(sentence vectors (n, L+1, dim), fp16 token vectors (T, dim), offsets (n+1,), punct (T,)) of ``doc_ids``."""
        rows = np.array([self.row_of[d] for d in doc_ids], dtype=np.int64)
        starts, ends = self.offsets[rows], self.offsets[rows + 1]
        spans = list(zip(starts.tolist(), ends.tolist(), strict=True))
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(ends - starts, out=offsets[1:])
        tokens = np.concatenate([self.tokens[s:e] for s, e in spans])  # fp16, as stored
        punct = np.concatenate([self.punct[s:e] for s, e in spans])
        return self.sentence[mode][rows], tokens, offsets, punct


class RaLaReranker:
    """Reranks first-stage candidates with Eq. 4 (default) or Eq. 3; see the module docstring."""

    name = "rala"

    def __init__(self, encoder: LayerEncoder, store: DocStore, stored: StoredFeatures | None = None, *,
                 layers: Sequence[int] = DEFAULT_LAYERS, last: int = -1, cls: str = DEFAULT_CLS, omega: bool = True,
                 variant: str = "eq4", fuse: str = DEFAULT_FUSE, rrf_c: float = 60.0, cache_size: int = 64) -> None:
        if variant not in VARIANTS:
            raise ConfigError(f"unknown RaLa variant {variant!r}; choose one of {sorted(VARIANTS)}")
        if fuse not in FUSIONS:
            raise ConfigError(f"unknown RaLa fuse {fuse!r}; choose one of {sorted(FUSIONS)}")
        if cls not in CLS_MODES:
            raise ConfigError(f"unknown RaLa cls {cls!r}; choose one of {sorted(CLS_MODES)}")
        n = encoder.layers
        self.last = last % n if -n <= last < n else -1
        self.layers = tuple(int(x) for x in layers)
        if self.last < 0 or not self.layers or any(not 0 <= x < self.last for x in self.layers):
            raise ConfigError(f"RaLa layers {list(layers)} must be hidden states before last={last} (0..{n - 1})")
        self.encoder, self.store, self.stored = encoder, store, stored
        self.cls, self.omega, self.variant, self.fuse, self.rrf_c = cls, omega, variant, fuse, rrf_c
        self._cache: OrderedDict[str, LayerFeatures] = OrderedDict()
        self._cache_size, self._lock = cache_size, threading.Lock()

    def encode_query(self, text: str) -> LayerFeatures:
        """The query's features (cached: a first stage sharing this forward pass costs nothing more)."""
        with self._lock:
            if text in self._cache:
                self._cache.move_to_end(text)
                return self._cache[text]
        feats = self.encoder.encode([text])
        with self._lock:
            self._cache[text] = feats
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return feats

    def _documents(self, doc_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if self.stored is not None and self.variant == "eq4":
            return self.stored.gather(doc_ids, self.cls)
        f = self.encoder.encode([self.store.get(d).contents for d in doc_ids], all_layer_tokens=self.variant == "eq3")
        tokens = f.layer_tokens if self.variant == "eq3" else f.tokens
        assert tokens is not None
        return f.sentence(self.cls), tokens, f.offsets, f.punct

    def scores(self, query: str, doc_ids: Sequence[str]) -> np.ndarray:
        """RaLa scores of ``doc_ids`` for ``query``, in input order."""
        q = self.encode_query(query)
        d_sent, d_tok, offsets, punct = self._documents(doc_ids)
        if self.variant == "eq3":
            return token_gap_score(q.tokens, d_tok, offsets, punct, self.last, self.layers)
        late = avg_maxsim(q.tokens, d_tok, offsets, punct)
        if not self.omega:
            return late
        return gap_weight(q.sentence(self.cls)[0, self.last], d_sent, self.last, self.layers) * late

    def rerank(self, query: str, hits: Sequence[Hit], k: int | None = None) -> list[Hit]:
        if not hits:
            return []
        ids = [h.doc_id for h in hits]
        by_rala = ranked(ids, self.scores(query, ids).tolist(), self.name, None if self.fuse == "rrf" else k)
        if self.fuse == "none":
            return by_rala
        first = [Hit(h.doc_id, h.score, i, h.source) for i, h in enumerate(hits, 1)]
        fused = rrf_scores([first, by_rala], [1.0, 1.0], self.rrf_c)
        return ranked(ids, [fused[d] for d in ids], self.name, k)


class SharedDenseRetriever(BatchRetriever):
    """Dense first stage whose query vector comes from RaLa's own forward pass (the mean-pooled last
    layer, i.e. the sentence embedding of a mean-pooled model), so reranking adds no second encoding.
    Only valid when the index was built with the same mean-pooled model (``compatible``)."""

    name = "dense"

    def __init__(self, index: Index, reranker: RaLaReranker) -> None:
        self.index, self.reranker = index, reranker
        self.doc_ids = index.store.ids

    @staticmethod
    def compatible(index: Index, encoder: LayerEncoder) -> bool:
        """The index's FAISS vectors are this encoder's mean-pooled last layer."""
        m = index.manifest
        return index.has("dense") and m.pooling == "mean" and m.encoder == encoder.name

    def _search_batch(self, queries: list[str], k: int) -> list[list[Hit]]:
        vectors = np.concatenate([self.reranker.encode_query(q).pooled for q in queries])
        return faiss_hits(self.index.faiss, self.doc_ids, vectors, k, self.name)


def open_rala(index: Index, *, encoder: str | None = None, **options: object) -> RaLaReranker:
    """A RaLa reranker over ``index``: its stored features when built with ``--extras rala``
    (else documents are encoded at query time), the index's encoder unless ``encoder`` is given."""
    name = encoder or index.manifest.encoder
    if name is None:
        raise ConfigError(f"index {index.folder} has no encoder: give RaLa an encoder (model name or path)")
    stored = StoredFeatures(index) if StoredFeatures.available(index) and encoder is None else None
    return RaLaReranker(LayerEncoder(name), index.store, stored, **options)  # type: ignore[arg-type]
