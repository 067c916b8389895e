"""Retrieval quality on real data with the embedded MiniLM encoder (the issue's acceptance figures)."""

from __future__ import annotations

import pytest
from tests.conftest import shared

from tandem.compose import build_method
from tandem.corpus import load_dataset
from tandem.eval.retrieval import evaluate_retrieval
from tandem.eval.retrieval_metrics import retrieval_scores
from tandem.index import build_index, open_index
from tandem.index.passage_graph import GraphExtra
from tandem.methods import Search
from tandem.methods.base import search_reranked
from tandem.methods.presets import preset
from tandem.retrieve import open_retriever
from tandem.testing.fake_llm import FakeLLM

pytestmark = pytest.mark.integration
# the held-out figures of the 5-fold cross-validation (docs/graph-tuning.md), a point below: HotpotQA R@5 95.7,
# R@2 85.6; MuSiQue-100 R@5 72.1 (the shipped ranker saw these questions, so the whole sets score higher)
GRAPH_FLOOR = {"recall@5": 0.947, "recall@2": 0.846}
MUSIQUE_FLOOR = 0.711


@pytest.fixture(scope="module")
def dev500(tmp_path_factory):
    ds = load_dataset(shared("hotpotqa/dev500.jsonl"))
    folder = tmp_path_factory.mktemp("dev500") / "hybrid"
    build_index(ds.passages, folder, kind="hybrid", extras=[GraphExtra()])  # the graph adds ~1 s
    return ds, open_index(folder, corpus=ds.passages, encoder="minilm")


@pytest.mark.parametrize(("kind", "floor"), [("bm25", 0.75), ("dense", 0.79), ("hybrid", 0.82)])
def test_dev500_pool_recall_at_5(dev500, kind, floor):
    ds, idx = dev500
    _, metrics = evaluate_retrieval(ds.questions, open_retriever(idx, kind), (2, 5, 10))
    assert metrics["questions"] == 500
    assert metrics["recall@5"] >= floor, metrics
    assert metrics["recall@2"] <= metrics["recall@5"] <= metrics["recall@10"]


def test_dev500_pool_graph_retriever(dev500):
    """The graph retriever with its defaults (PageRank, bridge expansion, learned ranker): the floors on all 500
    questions, and it must beat hybrid on the bridge questions (0-249, by following mentions) and on the
    comparison questions (250-499, by the passages the question names)."""
    ds, idx = dev500
    _, graph = evaluate_retrieval(ds.questions, open_retriever(idx, "graph"), (2, 5, 10))
    assert all(graph[m] >= floor for m, floor in GRAPH_FLOOR.items()), graph
    bridge, comparison = ds.questions[:250], ds.questions[250:]
    hybrid = open_retriever(idx, "hybrid")
    for part, margin in ((bridge, 0.05), (comparison, 0.03)):
        _, g = evaluate_retrieval(part, open_retriever(idx, "graph"), (5,))
        _, h = evaluate_retrieval(part, hybrid, (5,))
        assert g["recall@5"] >= h["recall@5"] + margin, (g, h)


def test_musique_graph_retriever(tmp_path):
    """MuSiQue-100 over its own 1,890-passage corpus: the graph retriever's floor, above hybrid."""
    ds = load_dataset(shared("musique/hipporag_100.json"))
    build_index(ds.passages, tmp_path / "musique", kind="hybrid", extras=[GraphExtra()])
    idx = open_index(tmp_path / "musique", corpus=ds.passages, encoder="minilm")
    _, graph = evaluate_retrieval(ds.questions, open_retriever(idx, "graph"), (2, 5, 10))
    _, hybrid = evaluate_retrieval(ds.questions, open_retriever(idx, "hybrid"), (2, 5, 10))
    assert graph["recall@5"] >= MUSIQUE_FLOOR and graph["recall@5"] > hybrid["recall@5"], (graph, hybrid)


def test_paper_preset_rerank_reorders_dev500(dev500):
    """The paper preset's read for the DualRAG baselines (BM25 top-50 -> MiniLM bi-encoder -> top-10) on dev500
    questions 0-99 is neither its first stage's top-10 nor dense top-10, and reads more gold passages than
    dense top-10 (measured: order differs from BM25's on 100/100, set from dense's on 84/100, recall@10 0.845 vs
    0.800; `python benchmarks/paper_rerank.py`). The same bi-encoder over the run's dense retriever would be the
    identity: the build skips it and says so."""
    ds, idx = dev500
    method = build_method("naive_rag", FakeLLM(), Search(open_retriever(idx, "dense"), idx.store),
                          settings=preset("paper", "naive_rag")[1])
    assert method.reranker is not None and method.search.retriever.name == "bm25" and method.candidates == 50
    bm25, dense = open_retriever(idx, "bm25"), open_retriever(idx, "dense")
    order_changed = set_changed = 0
    recall = {"preset": 0.0, "dense": 0.0}
    questions = ds.questions[:100]
    for q in questions:
        read = [h.doc_id for h in search_reranked(method.search, method.reranker, q.text, method.k, method.candidates)[0]]
        first, dense_top = [h.doc_id for h in bm25.search(q.text, 10)], [h.doc_id for h in dense.search(q.text, 10)]
        order_changed += read != first
        set_changed += set(read) != set(dense_top)
        recall["preset"] += retrieval_scores(q.gold_doc_ids, read, (10,))["recall@10"] / len(questions)
        recall["dense"] += retrieval_scores(q.gold_doc_ids, dense_top, (10,))["recall@10"] / len(questions)
    assert order_changed >= 90 and set_changed >= 70, (order_changed, set_changed)
    assert recall["preset"] > recall["dense"], recall
    identity = build_method("naive_rag", FakeLLM(), Search(dense, idx.store), reranker="bi_encoder", k=10, candidates=50)
    assert identity.reranker is None and identity.build_notes["rerank"].startswith("skipped:")
