"""CoopRAG with the embedded models: RaLa features stored at index time match query-time encoding,
the "mean" sentence vector is MiniLM's own embedding, and one dev500 question runs end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tests.conftest import shared

from tandem.compose import build_method
from tandem.corpus import load_dataset
from tandem.index import build_index, open_index
from tandem.index.encoder import load_encoder
from tandem.index.layers import rala_extras
from tandem.llm import load_llm
from tandem.methods import Search
from tandem.rerank.rala import SharedDenseRetriever, StoredFeatures, open_rala
from tandem.retrieve import open_retriever

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    ds = load_dataset(shared("hotpotqa/dev500.jsonl"))
    wanted = {d for q in ds.questions[:3] for d in q.metadata["context_ids"]}
    docs = [d for d in ds.passages if d.id in wanted]
    folder = tmp_path_factory.mktemp("idx") / "hybrid"
    # the reference backend, so FAISS vectors are comparable with RaLa's torch forward pass
    build_index(docs, folder, kind="hybrid", encoder=load_encoder("minilm", backend="st"), extras=[rala_extras()])
    return ds, docs, open_index(folder, encoder_backend="st")


def test_stored_features_match_query_time_encoding(small):
    _, docs, idx = small
    rala = open_rala(idx)
    ids = [d.id for d in docs[:4]]
    sent, tok, offsets, punct = StoredFeatures(idx).gather(ids, "mean")
    fresh = rala.encoder.encode([d.contents for d in docs[:4]])
    np.testing.assert_allclose(sent, fresh.mean, atol=2e-3)
    np.testing.assert_allclose(tok, fresh.tokens, atol=2e-3)
    assert offsets.tolist() == fresh.offsets.tolist() and punct.any()
    # the mean-pooled last layer is MiniLM's sentence embedding, i.e. the FAISS vectors
    stored = idx.faiss.reconstruct_n(0, 4)
    np.testing.assert_allclose(fresh.pooled, stored, atol=1e-4)
    assert SharedDenseRetriever.compatible(idx, rala.encoder)


def test_rala_changes_rankings_and_eq3_runs(small):
    ds, _, idx = small
    rala = open_rala(idx)
    dense = SharedDenseRetriever(idx, rala)
    q = ds.questions[0].text
    hits = dense.search(q, 20)
    dense_plain = open_retriever(idx, "dense").search(q, 20)
    assert [h.doc_id for h in hits] == [h.doc_id for h in dense_plain]
    out = rala.rerank(q, hits, 20)
    assert sorted(h.doc_id for h in out) == sorted(h.doc_id for h in hits)
    assert [h.doc_id for h in out] != [h.doc_id for h in hits]
    eq3 = open_rala(idx, variant="eq3").rerank(q, hits[:5], 5)
    assert len(eq3) == 5


def test_cooprag_one_question_with_smollm2(small):
    ds, _, idx = small
    search = Search(open_retriever(idx), idx.store)
    method = build_method("cooprag", load_llm("local"), search, n=20, k=5)
    question = ds.questions[0]
    answer = method.answer(question)
    names = [s.name for s in answer.trace.steps]
    assert names[:3] == ["unroll", "retrieve", "rerank"] and names[-1] == "answer"
    assert len(answer.trace.docs_read) == 5
    calls = answer.trace.llm_calls
    assert 2 <= len(calls) <= 7 and all(c.completion_tokens > 0 for c in calls)
    assert answer.trace.steps[1].queries[0].startswith(question.text)
    assert answer.trace.protocol()["unroll"] == {"calls": 1, "schema_decoded": 1, "parsed_first": 1, "repaired": 0,
                                                 "fell_back": 0}
    assert answer.trace.steps[0].notes["sub_questions"]  # U carries the unrolling


def test_cli_index_extras_rala(small, tmp_path):
    _, docs, _ = small
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d.to_dict()) + "\n" for d in docs[:6]), encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "tandem.cli", "index", "--corpus", str(corpus), "--kind", "dense",
                          "--extras", "rala", "--out", str(tmp_path / "idx")], cwd=ROOT, capture_output=True, text=True,
                         check=False)
    assert res.returncode == 0, res.stderr
    extras = open_index(tmp_path / "idx").manifest.extras
    assert extras["rala_offsets"]["shape"] == [7] and extras["rala_mean"]["shape"] == [6, 7, 384]
