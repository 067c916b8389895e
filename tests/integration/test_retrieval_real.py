"""Retrieval quality on real data with the embedded MiniLM encoder (the issue's acceptance figures)."""

from __future__ import annotations

import pytest
from tests.conftest import shared

from tandem.corpus import load_dataset
from tandem.eval.retrieval import evaluate_retrieval
from tandem.index import build_index, open_index
from tandem.retrieve import open_retriever

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def dev500(tmp_path_factory):
    ds = load_dataset(shared("hotpotqa/dev500.jsonl"))
    folder = tmp_path_factory.mktemp("dev500") / "hybrid"
    build_index(ds.passages, folder, kind="hybrid")
    return ds, open_index(folder, corpus=ds.passages, encoder="minilm")


@pytest.mark.parametrize(("kind", "floor"), [("bm25", 0.75), ("dense", 0.79), ("hybrid", 0.82)])
def test_dev500_pool_recall_at_5(dev500, kind, floor):
    ds, idx = dev500
    _, metrics = evaluate_retrieval(ds.questions, open_retriever(idx, kind), (2, 5, 10))
    assert metrics["questions"] == 500
    assert metrics["recall@5"] >= floor, metrics
    assert metrics["recall@2"] <= metrics["recall@5"] <= metrics["recall@10"]
