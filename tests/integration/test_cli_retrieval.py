"""The CLI end to end on the embedded encoder: index, retrieve, eval retrieval, and its errors."""

from __future__ import annotations

import json

import pytest
from tests.conftest import shared, tandem

pytestmark = pytest.mark.integration



def test_index_and_retrieve_demo_corpus(tmp_path):
    res = tandem("index", "--corpus", "examples/demo_corpus", "--kind", "hybrid", "--out", str(tmp_path / "idx"))
    assert res.returncode == 0, res.stderr
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["encoder"] == "minilm" and manifest["dim"] == 384 and manifest["kind"] == "hybrid"
    res = tandem("retrieve", "--index", str(tmp_path / "idx"), "-k", "2", "Where was Marie Curie born?")
    assert res.returncode == 0, res.stderr
    assert "Marie Curie" in res.stdout


def test_eval_retrieval_writes_run_folder(tmp_path):
    data = shared("fixtures/hotpot_example.jsonl")
    assert tandem("index", "--dataset", str(data), "--kind", "dense", "--out", str(tmp_path / "idx")).returncode == 0
    res = tandem("eval", "retrieval", "--dataset", str(data), "--index", str(tmp_path / "idx"),
                 "--k", "2", "5", "10", "--out", str(tmp_path / "run"))
    assert res.returncode == 0, res.stderr
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["questions"] == 10
    assert {"recall@2", "recall@5", "recall@10", "all_gold@5", "mrr", "ndcg@10"} <= set(metrics)
    assert 0.5 <= metrics["recall@10"] <= 1.0
    rows = (tmp_path / "run" / "per_question.jsonl").read_text().splitlines()
    assert len(rows) == 10 and len(json.loads(rows[0])["hits"]) == 10
    assert json.loads((tmp_path / "run" / "config.json").read_text())["k"] == [2, 5, 10]
    assert "recall@5" in (tmp_path / "run" / "metrics.md").read_text()


def test_eval_against_index_of_another_corpus_is_a_clear_error(tmp_path):
    assert tandem("index", "--corpus", "examples/demo_corpus", "--kind", "bm25", "--out", str(tmp_path / "idx")).returncode == 0
    res = tandem("eval", "retrieval", "--dataset", str(shared("fixtures/hotpot_example.jsonl")),
                 "--index", str(tmp_path / "idx"), "--out", str(tmp_path / "run"))
    assert res.returncode == 2
    assert "different corpus" in res.stderr
    assert not (tmp_path / "run").exists()


def test_bad_input_is_reported_with_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "text": "ok"}\n{"id": "2", "text": \n')
    res = tandem("index", "--corpus", str(bad), "--kind", "bm25", "--out", str(tmp_path / "idx"))
    assert res.returncode == 2
    assert f"{bad}:2: malformed JSON" in res.stderr.replace("\n", "")
    assert not (tmp_path / "idx").exists()
