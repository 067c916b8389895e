"""Exports of run folders: FlashRAG's intermediate_data.json + metric_score.txt, TREC run files and qrels,
written from real (small) QA and retrieval runs and read back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tandem.cli import app
from tandem.compose import build_method
from tandem.corpus import load_dataset
from tandem.errors import DataError
from tandem.eval.export import (
    INTERMEDIATE_FILE,
    METRIC_SCORE_FILE,
    export_flashrag,
    export_trec,
    index_passages,
    read_run,
    run_questions,
)
from tandem.eval.retrieval import evaluate_retrieval
from tandem.eval.rundir import PER_QUESTION, RunDir
from tandem.eval.runner import run_qa
from tandem.index import build_index, open_index
from tandem.methods import Search
from tandem.retrieve import open_retriever
from tandem.testing.fake_llm import FakeLLM

PARAGRAPHS = {
    "Marie Curie": "Marie Curie was born in Warsaw and won two Nobel Prizes.",
    "Pierre Curie": "Pierre Curie was a French physicist born in Paris.",
    "Warsaw": "Warsaw is the capital of Poland on the Vistula river.",
    "Vistula": "The Vistula is the longest river in Poland.",
    "Paris": "Paris is the capital of France on the Seine.",
}
QUESTIONS = [
    ("q1", "In which country was Marie Curie born?", "Poland", ["Marie Curie", "Warsaw"]),
    ("q2", "Which river flows through the capital of Poland?", "Vistula", ["Warsaw", "Vistula"]),
    ("q3", "Where was Pierre Curie born?", "Paris", ["Pierre Curie"]),
]


@pytest.fixture
def setup(tmp_path: Path):
    """A MuSiQue-style dataset over the paragraphs, its index, a QA run and a retrieval run."""
    records = [{"id": qid, "question": text, "answer": answer,
                "paragraphs": [{"idx": i, "title": t, "paragraph_text": p, "is_supporting": t in gold}
                               for i, (t, p) in enumerate(PARAGRAPHS.items())]}
               for qid, text, answer, gold in QUESTIONS]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    ds = load_dataset(data)
    build_index(ds.passages, tmp_path / "idx", kind="bm25")
    idx = open_index(tmp_path / "idx")
    llm = FakeLLM(rules=[("Marie", "Poland"), ("river", "Vistula")], default="London")
    method = build_method("naive_rag", llm, Search(open_retriever(idx), idx.store), k=2)
    config = {"task": "qa", "method": "naive_rag", "dataset": str(data), "format": ds.format,
              "index": str(tmp_path / "idx"), "llm": "fake", "judge": None, "reanswer": False}
    run_qa(method, ds.questions, tmp_path / "qa", config)
    records, metrics = evaluate_retrieval(ds.questions, open_retriever(idx), (2, 5))
    run = RunDir(tmp_path / "ret", "retrieval-run")
    run.write_config({"task": "retrieval", "dataset": str(data), "index": str(tmp_path / "idx"), "retriever": "bm25"})
    run.write_records(PER_QUESTION, records)
    run.write_metrics(metrics, [metrics], "retrieval")
    return tmp_path, ds


def test_flashrag_export_structure(setup):
    tmp_path, ds = setup
    run = read_run(tmp_path / "qa")
    stats = export_flashrag(run, tmp_path / "fr", index_passages(run), run_questions(run))
    items = json.loads((tmp_path / "fr" / INTERMEDIATE_FILE).read_text())
    assert stats["items"] == len(items) == 3
    by_id = {i["id"]: i for i in items}
    assert set(by_id) == {"q1", "q2", "q3"}
    docs = {d.id: d for d in ds.passages}
    for item in items:
        assert set(item) == {"id", "question", "golden_answers", "metadata", "output"}
        out = item["output"]
        assert {"retrieval_result", "prompt", "raw_pred", "pred", "metric_score"} <= set(out)
        assert len(out["retrieval_result"]) == 2
        for doc in out["retrieval_result"]:  # FlashRAG's corpus form: "Title"\ntext
            title, text = docs[doc["id"]].title, docs[doc["id"]].text
            assert doc["contents"] == f'"{title}"\n{text}'
        assert out["prompt"][-1]["role"] == "user" and item["question"] in out["prompt"][-1]["content"]
        assert out["raw_pred"] == out["pred"]
        question = {q.id: q for q in ds.questions}[item["id"]]
        assert item["metadata"]["gold_doc_ids"] == list(question.gold_doc_ids)
    assert by_id["q1"]["output"]["pred"] == "Poland" and by_id["q1"]["output"]["metric_score"]["em"] == 1.0
    assert by_id["q3"]["output"]["metric_score"]["em"] == 0.0
    scores = dict(line.split(": ") for line in (tmp_path / "fr" / METRIC_SCORE_FILE).read_text().splitlines())
    assert float(scores["em"]) == pytest.approx(2 / 3)
    assert list(scores)[:2] == ["em", "f1"] and "rouge-l" in scores and "gold_doc_recall" in scores
    # FlashRAG's dataset fields: the export reads back as a FlashRAG dataset with the same questions
    back = load_dataset(tmp_path / "fr" / INTERMEDIATE_FILE)
    assert back.format == "flashrag"
    assert [(q.id, q.text, q.answers) for q in back.questions] == [(q.id, q.text, q.answers) for q in ds.questions]


def _trec(path: Path) -> list[tuple[str, str, str, int, float, str]]:
    rows = []
    for line in path.read_text().splitlines():
        qid, q0, doc, rank, score, tag = line.split()
        rows.append((qid, q0, doc, int(rank), float(score), tag))
    return rows


def _check_ranked(rows):
    by_q: dict[str, list] = {}
    for row in rows:
        assert row[1] == "Q0"
        by_q.setdefault(row[0], []).append(row)
    for lines in by_q.values():
        assert [r[3] for r in lines] == list(range(1, len(lines) + 1))  # ranks ascend from 1
        # scores fall even as trec_eval reads them (float32), so TREC tools keep the run's order
        assert all(np.float32(a[4]) > np.float32(b[4]) for a, b in zip(lines, lines[1:], strict=False))
        assert len({r[2] for r in lines}) == len(lines)
    return by_q


def test_trec_export_of_a_retrieval_run(setup):
    tmp_path, ds = setup
    run = read_run(tmp_path / "ret")
    stats = export_trec(run, tmp_path / "run.trec", qrels=tmp_path / "run.qrels")
    rows = _trec(tmp_path / "run.trec")
    assert len(rows) == stats["lines"]
    by_q = _check_ranked(rows)
    records = {r["id"]: r for r in run.records}
    for qid, lines in by_q.items():
        assert [r[2] for r in lines] == [h["doc_id"] for h in records[qid]["hits"]]
        assert [r[4] for r in lines] == pytest.approx([h["score"] for h in records[qid]["hits"]])
        assert {r[5] for r in lines} == {"tandem-bm25"}
    qrels = [line.split() for line in (tmp_path / "run.qrels").read_text().splitlines()]
    gold = {(q.id, g) for q in ds.questions for g in q.gold_doc_ids}
    assert {(q, d) for q, _, d, _ in qrels} == gold and {(z, r) for _, z, _, r in qrels} == {("0", "1")}
    # recall@2 from the exported files equals the run's own R@2
    hits = {(r[0], r[2]) for r in rows if r[3] <= 2}
    per_q = [len({g for g in q.gold_doc_ids if (q.id, g) in hits}) / len(q.gold_doc_ids) for q in ds.questions]
    assert sum(per_q) / len(per_q) == pytest.approx(run.metrics["recall@2"])


def test_trec_export_of_a_qa_run(setup):
    tmp_path, ds = setup
    run = read_run(tmp_path / "qa")
    export_trec(run, tmp_path / "qa.trec", qrels=tmp_path / "qa.qrels", tag="my run", questions=run_questions(run))
    by_q = _check_ranked(_trec(tmp_path / "qa.trec"))
    records = {r["id"]: r for r in run.records}
    for qid, lines in by_q.items():
        assert [r[2] for r in lines] == records[qid]["trace"]["docs_read"]
        assert {r[5] for r in lines} == {"my%20run"}
    assert len((tmp_path / "qa.qrels").read_text().splitlines()) == sum(len(q.gold_doc_ids) for q in ds.questions)


def test_export_errors(setup, tmp_path: Path):
    root, _ = setup
    with pytest.raises(DataError, match="FlashRAG export needs a `tandem eval qa` run"):
        export_flashrag(read_run(root / "ret"), tmp_path / "fr", lambda d: None)
    with pytest.raises(DataError, match="not a tandem run folder"):
        read_run(root / "idx")
    bad = root / "qa" / "predictions.jsonl"
    bad.write_text(bad.read_text() + "{oops\n")
    with pytest.raises(DataError, match=r"predictions\.jsonl:4: malformed JSON"):
        read_run(root / "qa")
    config = json.loads((root / "ret" / "config.json").read_text())
    (root / "ret" / "config.json").write_text(json.dumps({**config, "index": str(tmp_path / "gone")}))
    with pytest.raises(DataError, match="give --index"):
        index_passages(read_run(root / "ret"))


def test_cli_export_commands(setup):
    tmp_path, _ = setup
    runner = CliRunner()
    result = runner.invoke(app, ["export", "flashrag", str(tmp_path / "qa"), "--out", str(tmp_path / "cli-fr")])
    assert result.exit_code == 0, result.output
    assert len(json.loads((tmp_path / "cli-fr" / INTERMEDIATE_FILE).read_text())) == 3
    result = runner.invoke(app, ["export", "trec", str(tmp_path / "ret"), "--out", str(tmp_path / "cli.trec")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "cli.trec.qrels").exists() and _check_ranked(_trec(tmp_path / "cli.trec"))


def test_tied_and_unordered_scores_keep_the_run_order():
    from tandem.eval.export import ranked

    hits = [{"doc_id": d, "score": s, "rank": r} for r, (d, s) in enumerate([("z", 0.5), ("a", 0.5), ("m", 0.25)], 1)]
    pairs = ranked({"id": "q", "hits": hits}, "retrieval-run")
    assert [d for d, _ in pairs] == ["z", "a", "m"]  # a TREC tool would otherwise put "a" first (ties by doc id)
    assert pairs[0][1] == 0.5 > pairs[1][1] == pytest.approx(0.5, rel=1e-7) and pairs[2][1] == 0.25
    assert np.float32(pairs[0][1]) > np.float32(pairs[1][1])
    close = [{"doc_id": d, "score": s, "rank": r} for r, (d, s) in enumerate([("b", 0.1 + 1e-12), ("a", 0.1)], 1)]
    first, second = ranked({"id": "q", "hits": close}, "retrieval-run")
    assert np.float32(first[1]) > np.float32(second[1])  # distinct in double, tied in float32
    rising = [{"doc_id": d, "score": s, "rank": r} for r, (d, s) in enumerate([("x", 0.1), ("y", 0.9)], 1)]
    assert ranked({"id": "q", "hits": rising}, "retrieval-run") == [("x", 1.0), ("y", 0.5)]
