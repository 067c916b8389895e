"""RaLa on small hand-built vectors: the gap weight, the punctuation mask, Eq. 3, and reranking that
actually reorders the first stage."""

from __future__ import annotations

import numpy as np
import pytest

from tandem.errors import ConfigError
from tandem.index.layers import LayerFeatures, features_to_extras
from tandem.index.store import DocStore
from tandem.rerank import Reranker
from tandem.rerank.rala import RaLaReranker, avg_maxsim, gap_weight, token_gap_score
from tandem.types import Hit


def unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_gap_weight_is_last_layer_cosine_minus_min_over_candidates():
    q = unit(1, 0)
    # two documents, hidden states 0..2 (2 = last); cosines with q: doc A (0.0, 1.0, 0.6), doc B (0.8, 0.6, 1.0)
    docs = np.stack([
        [unit(0, 1), unit(1, 0), unit(0.6, 0.8)],
        [unit(0.8, 0.6), unit(0.6, 0.8), unit(1, 0)],
    ])
    w = gap_weight(q, docs, last=2, candidates=[0, 1])
    np.testing.assert_allclose(w, [0.6 - 0.0, 1.0 - 0.6], atol=1e-6)
    np.testing.assert_allclose(gap_weight(q, docs, last=2, candidates=[1]), [0.6 - 1.0, 1.0 - 0.6], atol=1e-6)
    np.testing.assert_allclose(gap_weight(q, docs, last=-1, candidates=[0]), [0.6, 0.2], atol=1e-6)


def test_avg_maxsim_and_punctuation_mask():
    q = np.stack([unit(1, 0, 0), unit(0, 1, 0)])
    # doc 0 = tokens 0..1, doc 1 = tokens 2..4; token 3 is punctuation and would be the best match for q[1]
    d = np.stack([unit(1, 0, 0), unit(0, 0, 1), unit(0.6, 0.8, 0), unit(0, 1, 0), unit(0, 0, 1)])
    offsets = np.array([0, 2, 5])
    plain = avg_maxsim(q, d, offsets, np.zeros(5, bool))
    np.testing.assert_allclose(plain, [(1.0 + 0.0) / 2, (0.6 + 1.0) / 2], atol=1e-6)
    punct = np.array([False, False, False, True, False])
    masked = avg_maxsim(q, d, offsets, punct)
    np.testing.assert_allclose(masked, [0.5, (0.6 + 0.8) / 2], atol=1e-6)
    # a masked token scores 0 (a zero vector), so it still beats negative similarities
    neg = avg_maxsim(unit(1, 0, 0)[None], np.stack([unit(-1, 0.1, 0), unit(1, 0, 0)]), np.array([0, 2]),
                     np.array([False, True]))
    np.testing.assert_allclose(neg, [0.0], atol=1e-6)


def test_token_gap_score_eq3():
    q = unit(1, 0)[None]
    # one document with 2 tokens, hidden states 0..2; per token: <q, d^2> - min(<q, d^0>, <q, d^1>)
    tok = np.stack([
        [unit(1, 0), unit(0.6, 0.8), unit(0.8, 0.6)],  # 0.8 - min(1.0, 0.6) = 0.2
        [unit(0, 1), unit(0.6, 0.8), unit(1, 0)],      # 1.0 - min(0.0, 0.6) = 1.0
    ])
    s = token_gap_score(q, tok, np.array([0, 2]), np.zeros(2, bool), last=2, candidates=[0, 1])
    np.testing.assert_allclose(s, [1.0], atol=1e-6)
    s = token_gap_score(q, tok, np.array([0, 2]), np.array([False, True]), last=2, candidates=[0, 1])
    np.testing.assert_allclose(s, [0.2], atol=1e-6)


class StubEncoder:
    """Hand-built features per text: a query and two documents in 2 dimensions, hidden states 0..2."""

    layers = 3
    name = "stub"

    def __init__(self, table: dict[str, LayerFeatures]) -> None:
        self.table = table

    def encode(self, texts, *, batch_size=32, all_layer_tokens=False, on_progress=None):
        parts = [self.table[t] for t in texts]
        lengths = [p.tokens.shape[0] for p in parts]
        return LayerFeatures(
            mean=np.concatenate([p.mean for p in parts]), cls=np.concatenate([p.cls for p in parts]),
            tokens=np.concatenate([p.tokens for p in parts]),
            offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            punct=np.concatenate([p.punct for p in parts]),
        )


def feats(layers: list[np.ndarray], tokens: list[np.ndarray], punct: list[bool] | None = None) -> LayerFeatures:
    sent = np.stack(layers)[None]
    return LayerFeatures(mean=sent, cls=sent, tokens=np.stack(tokens), offsets=np.array([0, len(tokens)]),
                         punct=np.array(punct or [False] * len(tokens)))


@pytest.fixture
def stub():
    docs = [("a", "A", "first"), ("b", "B", "second")]
    from tandem.types import Document

    store = DocStore([Document(i, t, x) for i, t, x in docs])
    table = {
        "query": feats([unit(1, 0)] * 3, [unit(1, 0), unit(0, 1)]),
        # doc a: close at the last layer but also at the early layers (w = 0.95 - 0.8); MaxSim (1 + 0.8) / 2
        "A\nfirst": feats([unit(0.8, 0.6), unit(0.9, 0.44), unit(0.95, 0.31)], [unit(1, 0), unit(0.6, 0.8)]),
        # doc b: far at the early layers, close at the last one (w = 0.9 - 0); MaxSim (0.9 + 0.8) / 2
        "B\nsecond": feats([unit(0, 1), unit(0.3, 0.95), unit(0.9, 0.44)], [unit(0.9, 0.44), unit(0.6, 0.8)]),
    }
    return StubEncoder(table), store


def test_rerank_changes_the_first_stage_order(stub):
    encoder, store = stub
    first_stage = [Hit("a", 0.9, 1, "dense"), Hit("b", 0.8, 2, "dense")]
    rala = RaLaReranker(encoder, store, layers=(0, 1), last=-1, fuse="none")
    assert isinstance(rala, Reranker)
    out = rala.rerank("query", first_stage, k=2)
    assert [h.doc_id for h in out] == ["b", "a"] and [h.rank for h in out] == [1, 2]
    assert all(h.source == "rala" for h in out) and out[0].score > out[1].score
    # without the gap weight, late interaction alone keeps doc a first
    plain = RaLaReranker(encoder, store, layers=(0, 1), omega=False, fuse="none").rerank("query", first_stage, k=1)
    assert [h.doc_id for h in plain] == ["a"]
    assert rala.rerank("query", [], k=3) == []


def test_rrf_fusion_of_first_stage_and_rala_orders(stub, monkeypatch):
    encoder, store = stub
    rala = RaLaReranker(encoder, store, layers=(0, 1))
    assert rala.fuse == "rrf"
    monkeypatch.setattr(rala, "scores", lambda query, ids: np.array([{"a": 0.1, "b": 0.5, "c": 0.9}[d] for d in ids]))
    first_stage = [Hit("a", 3.0, 1, "dense"), Hit("b", 2.0, 2, "dense"), Hit("c", 1.0, 3, "dense")]
    # RaLa alone: c, b, a. Fused: a = 1/61 + 1/63 = c (tie kept in first-stage order) > b = 2/62
    out = rala.rerank("query", first_stage)
    assert [h.doc_id for h in out] == ["a", "c", "b"]
    assert out[0].score == pytest.approx(1 / 61 + 1 / 63) and out[2].score == pytest.approx(2 / 62)
    rala.fuse = "none"
    assert [h.doc_id for h in rala.rerank("query", first_stage, k=2)] == ["c", "b"]


def test_stored_extras_give_the_same_scores_as_encoding(stub, tmp_path):
    from tandem.rerank.rala import StoredFeatures

    encoder, store = stub
    extras = features_to_extras(encoder.encode(["A\nfirst", "B\nsecond"]))
    assert extras["rala_tokens"].dtype == np.float16 and extras["rala_offsets"].tolist() == [0, 2, 4]

    class FakeIndex:
        def __init__(self):
            self.store = store

        def extra(self, name):
            return extras[name]

    stored = StoredFeatures(FakeIndex())
    on_the_fly = RaLaReranker(encoder, store, layers=(0, 1)).scores("query", ["b", "a"])
    from_index = RaLaReranker(encoder, store, stored, layers=(0, 1)).scores("query", ["b", "a"])
    np.testing.assert_allclose(from_index, on_the_fly, atol=2e-3)


def test_settings_are_checked(stub):
    encoder, store = stub
    for bad in ({"layers": (2,)}, {"layers": ()}, {"layers": (0,), "last": 7}, {"variant": "eq9"}, {"cls": "max"},
                {"fuse": "sum"}):
        with pytest.raises(ConfigError):
            RaLaReranker(encoder, store, **bad)
