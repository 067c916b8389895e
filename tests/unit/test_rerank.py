"""Rerankers behind the Reranker protocol: ranking helper, bi-encoder (index vectors or encoding), cross-encoder."""

from __future__ import annotations

import numpy as np
import pytest

from tandem.index import build_index, open_index
from tandem.index.store import DocStore
from tandem.methods.parts import build_reranker
from tandem.methods.settings import RerankSettings
from tandem.rerank import BiEncoderReranker, CrossEncoderReranker, Reranker, ranked
from tandem.rerank.base import Reranked
from tandem.testing.encoders import HashingEncoder
from tandem.types import Hit


def candidates(ids):
    return [Hit(d, 1.0 / (i + 1), i + 1, "bm25") for i, d in enumerate(ids)]


def test_ranked_sorts_filters_and_cuts():
    hits = ranked(["a", "b", "c", "d"], [0.5, 2.0, -1.0, 0.0], "x", k=None, min_score=0.0)
    assert [(h.doc_id, h.rank) for h in hits] == [("b", 1), ("a", 2)]  # 0.0 and below dropped
    assert [h.doc_id for h in ranked(["a", "b", "c"], [1.0, 1.0, 3.0], "x", k=2)] == ["c", "a"]  # ties keep order


def test_bi_encoder_with_index_vectors_equals_encoding(tmp_path, small_docs):
    enc = HashingEncoder()
    build_index(small_docs, tmp_path / "idx", kind="dense", encoder=enc)
    idx = open_index(tmp_path / "idx")
    idx.__dict__["encoder"] = enc
    from_index = build_reranker(RerankSettings(reranker="bi_encoder"), idx.store, idx)
    assert isinstance(from_index, Reranker) and from_index.doc_vectors is not None
    every_row = from_index.doc_vectors[list(range(len(small_docs)))]
    np.testing.assert_allclose(every_row, enc.encode([d.contents for d in small_docs]), atol=1e-6)
    encoding = BiEncoderReranker(enc, idx.store)
    pool = candidates(["d5", "d2", "d4", "d3", "d1"])
    a, b = from_index.rerank("Warsaw capital of Poland", pool, 3), encoding.rerank("Warsaw capital of Poland", pool, 3)
    assert [h.doc_id for h in a] == [h.doc_id for h in b] and a[0].doc_id == "d3"
    assert [h.rank for h in a] == [1, 2, 3] and all(h.source == "bi_encoder" for h in a)
    assert from_index.rerank("q", [], 3) == []


@pytest.mark.parametrize("store", [{"faiss": "flat"}, {"faiss": "ivfpq", "nlist": 2, "pq_m": 8, "pq_nbits": 2}])
def test_bi_encoder_reads_the_stores_exact_rows_without_a_copy(tmp_path, small_docs, store):
    enc = HashingEncoder()
    build_index(small_docs, tmp_path / "idx", kind="dense", encoder=enc, dense_params=store)
    idx = open_index(tmp_path / "idx")
    idx.__dict__["encoder"] = enc
    rows = build_reranker(RerankSettings(reranker="bi_encoder"), idx.store, idx).doc_vectors
    np.testing.assert_allclose(rows[[2, 0]], enc.encode([small_docs[2].contents, small_docs[0].contents]), atol=1e-6)
    if store["faiss"] == "flat":  # a view of the index's own storage
        view = rows.array
        assert view.base is not None and not view.flags.owndata


def test_reranked_sends_a_batch_to_the_first_stage_once(tmp_path, small_docs):
    enc = HashingEncoder()
    build_index(small_docs, tmp_path / "idx", kind="dense", encoder=enc)
    idx = open_index(tmp_path / "idx", encoder=enc)
    from tandem.retrieve.dense import DenseRetriever

    class Counting(DenseRetriever):
        calls: list[int] = []

        def _search_batch(self, queries, k):
            self.calls.append(len(queries))
            return super()._search_batch(queries, k)

    first, reranker = Counting(idx), BiEncoderReranker(enc, idx.store)
    queries = ["Warsaw capital of Poland", "Marie Curie physicist", "river Seine"]
    both, alone = Reranked(first, reranker, 4), Reranked(first, None, 4)
    batched, plain = both.search_batch(queries, 2), alone.search_batch(queries, 2)
    assert first.calls == [3, 3]  # one first-stage batch per search_batch
    assert batched == [reranker.rerank(q, first.search(q, 4), 2) for q in queries]
    assert plain == [first.search(q, 2) for q in queries] and both.name == "dense+bi_encoder"


def test_build_reranker_none_and_ivf_encodes(tmp_path, small_docs):
    enc = HashingEncoder()
    build_index(small_docs, tmp_path / "idx", kind="dense", encoder=enc, dense_params={"faiss": "hnsw"})
    idx = open_index(tmp_path / "idx")
    idx.__dict__["encoder"] = enc
    assert build_reranker(RerankSettings(reranker="none"), idx.store, idx) is None
    assert build_reranker(RerankSettings(reranker="bi_encoder"), idx.store, idx).doc_vectors is None  # not a flat index: encode on the fly


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory):
    """A CrossEncoder folder built from the embedded MiniLM with a fresh 1-logit head (no hub needed)."""
    transformers = pytest.importorskip("transformers")
    from tandem.model_files import offline_env, resolve_model

    offline_env()
    src = resolve_model("minilm")
    folder = tmp_path_factory.mktemp("ce") / "minilm-ce"
    transformers.set_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(src, num_labels=1)
    model.save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(src).save_pretrained(folder)
    return str(folder)


@pytest.mark.integration
def test_cross_encoder_raw_logits_and_min_score(tiny_cross_encoder, small_docs):
    store = DocStore(small_docs)
    pool = candidates([d.id for d in small_docs])
    plain = CrossEncoderReranker(tiny_cross_encoder, store)
    scored = plain.rerank("Where was Marie Curie born?", pool)
    assert len(scored) == 5 and [h.rank for h in scored] == [1, 2, 3, 4, 5]
    scores = [h.score for h in scored]
    assert scores == sorted(scores, reverse=True)
    raw = plain.model.predict([("Where was Marie Curie born?", store.get(h.doc_id).contents) for h in scored],
                              activation_fn=__import__("torch").nn.Identity())
    np.testing.assert_allclose(scores, raw, rtol=1e-5, atol=1e-6)  # raw logits, no sigmoid
    cut = float(np.median(scores))  # DualRAG's default min_score is 0.0; the median makes the cut non-trivial
    filtering = build_reranker(RerankSettings(reranker="cross_encoder", reranker_model=tiny_cross_encoder, min_score=cut), store, None)
    assert isinstance(filtering, CrossEncoderReranker) and filtering.min_score == cut
    filtered = filtering.rerank("Where was Marie Curie born?", pool, 10)
    assert [h.doc_id for h in filtered] == [h.doc_id for h in scored if h.score > cut] and 0 < len(filtered) < 5
    assert [h.doc_id for h in filtering.rerank("Where was Marie Curie born?", pool, 1)] == [scored[0].doc_id]
