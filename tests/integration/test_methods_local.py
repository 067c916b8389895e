"""Every baseline end to end on the embedded SmolLM2 over real dev500 questions (BM25 index). The
methods with their own loops (DualRAG, CoopRAG, R²AG, ...) have their own integration test files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import shared

from tandem.compose import build_method
from tandem.corpus import load_dataset
from tandem.eval.qa_metrics import f1_score
from tandem.index import build_index, open_index
from tandem.llm import load_llm
from tandem.methods import Search
from tandem.registry import METHODS
from tandem.retrieve import open_retriever

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    ds = load_dataset(shared("hotpotqa/dev500.jsonl"))
    folder = tmp_path_factory.mktemp("idx") / "bm25"
    build_index(ds.passages, folder, kind="bm25")
    idx = open_index(folder)
    return ds, Search(open_retriever(idx), idx.store), load_llm("local")


BASELINES = ("direct", "naive_rag", "oracle", "ircot")


@pytest.mark.parametrize("name", BASELINES)
def test_method_runs_end_to_end(setup, name):
    assert name in METHODS
    ds, search, llm = setup
    hyper = {"max_steps": 2} if name == "ircot" else {}
    method = build_method(name, llm, search, search.store, **hyper)
    question = ds.questions[0]
    answer = method.answer(question)
    calls = answer.trace.llm_calls
    assert calls and all(c.completion_tokens > 0 and c.prompt_tokens > 0 for c in calls)
    assert answer.text.strip(), "the embedded model gave an empty answer"
    if name == "direct":
        assert answer.trace.docs_read == [] and len(calls) == 1
    if name == "naive_rag":
        assert len(answer.trace.docs_read) == 5 and len(calls) == 1
    if name == "oracle":
        assert set(answer.trace.docs_read) == set(question.gold_doc_ids)
    if name == "ircot":
        assert answer.trace.steps[0].queries == [question.text]
        assert 1 <= len([s for s in answer.trace.steps if s.name.startswith("reason")]) <= 2
        assert len(calls) <= 3


def test_eval_qa_cli_on_local_model(tmp_path):
    data = shared("hotpotqa/dev500.jsonl")
    assert subprocess.run([sys.executable, "-m", "tandem.cli", "index", "--dataset", str(data), "--kind", "bm25",
                           "--out", str(tmp_path / "idx")], cwd=ROOT, capture_output=True).returncode == 0
    res = subprocess.run([sys.executable, "-m", "tandem.cli", "eval", "qa", "--method", "naive_rag", "--dataset", str(data),
                          "--index", str(tmp_path / "idx"), "--limit", "2", "--out", str(tmp_path / "run")],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["questions"] == 2 and metrics["errors"] == 0
    assert metrics["llm_calls_per_q"] == 1.0
    rows = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    golds = {q.id: q.answers for q in load_dataset(data).questions[:2]}  # F1 is the mean over the saved predictions
    assert metrics["f1"] == pytest.approx(sum(f1_score(r["prediction"], golds[r["id"]]) for r in rows) / 2)
    assert metrics["gold_doc_recall"] > 0
    assert (tmp_path / "run" / "llm-cache.sqlite").exists()
