"""SFT export: per-role chat JSONL from the traces of correctly answered questions of a DualRAG run."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tandem.cli import app
from tandem.errors import DataError
from tandem.eval.runner import run_qa
from tandem.index import build_index, open_index
from tandem.methods import Search
from tandem.methods.dualrag import DualRAG, DualRAGSettings
from tandem.methods.dualrag.sft_export import export_sft, is_correct
from tandem.retrieve import open_retriever
from tandem.testing.fake_llm import FakeLLM
from tandem.types import Question

ROLE_FILES = ("reasoner", "entity_identifier", "summarizer", "answer")
RIGHT = Question("right", "Which river flows through the city where Marie Curie was born?", ("Vistula",))
WRONG = Question("wrong", "Where was Pierre Curie born?", ("Paris",))


def reply(req) -> str:
    """Scripted replies by role (recognised from the prompt); the first Reasoner reply of 'right' is malformed."""
    text = req.prompt_text
    if "You are the reasoning half" in text:
        if "Reply again" in req.last_user:
            return json.dumps({"thought": "I need Marie Curie's birthplace.", "need_retrieve": True})
        if "Marie Curie" in text and "#### Marie Curie" not in text:
            return "I need Marie Curie's birthplace, then its river."  # not JSON: repaired next
        return json.dumps({"thought": "Done.", "need_retrieve": False})
    if "You plan retrieval" in text:
        return json.dumps({"entities": [{"entity": "Marie Curie", "keywords": ["Marie Curie born"]}]})
    if "You keep the notes" in text:
        return json.dumps({"notes": "Marie Curie was born in Warsaw."})
    return "Vistula" if "Marie Curie" in req.last_user else "London"


@pytest.fixture
def run_dir(tmp_path, small_docs):
    build_index(small_docs, tmp_path / "idx", kind="bm25")
    idx = open_index(tmp_path / "idx")
    method = DualRAG(FakeLLM(default=reply), Search(open_retriever(idx), idx.store), DualRAGSettings(question_query=False))
    out = tmp_path / "run"
    run_qa(method, [RIGHT, WRONG], out, {"method": "dualrag", "dataset": "test"})
    return out


def read(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_export_keeps_correct_questions_with_exact_prompts(run_dir, tmp_path):
    stats = export_sft(run_dir, tmp_path / "sft")
    assert stats["questions"] == 2 and stats["correct_questions"] == 1
    assert stats["examples"] == {"reasoner": 2, "entity_identifier": 1, "summarizer": 1, "answer": 1}
    assert stats["repaired_reasoner"] == 1
    assert json.loads((tmp_path / "sft" / "stats.json").read_text()) == stats
    trace = read(run_dir / "predictions.jsonl")
    trace = next(r for r in trace if r["id"] == "right")["trace"]
    first_call = trace["steps"][0]["llm_calls"][0]
    reasoner = read(tmp_path / "sft" / "reasoner.jsonl")
    # the original prompt, answered by the reply that parsed (the repair round's)
    assert reasoner[0]["messages"][:-1] == first_call["messages"]
    assert reasoner[0]["messages"][-1] == {"role": "assistant", "content": json.dumps(
        {"thought": "I need Marie Curie's birthplace.", "need_retrieve": True})}
    assert all("Reply again" not in m["content"] for ex in reasoner for m in ex["messages"])
    summarizer = read(tmp_path / "sft" / "summarizer.jsonl")
    assert summarizer[0]["messages"][-1]["content"] == json.dumps({"notes": "Marie Curie was born in Warsaw."})
    assert "Entity: Marie Curie" in summarizer[0]["messages"][0]["content"]
    assert read(tmp_path / "sft" / "answer.jsonl")[0]["messages"][-1]["content"] == "Vistula"
    for role in ROLE_FILES:
        assert all(set(ex) == {"messages"} for ex in read(tmp_path / "sft" / f"{role}.jsonl"))


def test_metric_and_threshold(run_dir, tmp_path):
    stats = export_sft(run_dir, tmp_path / "all", metrics=["f1"], threshold=0.0)
    assert stats["correct_questions"] == 2
    assert is_correct({"scores": {"em": 0, "acc": 1}}) and not is_correct({"scores": {"em": 0, "acc": 0}})
    assert not is_correct({"error": "x", "scores": {"em": 1}})


def test_unparsed_calls_are_skipped(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    bad = {"role": "entity_identifier", "messages": [{"role": "user", "content": "p"}], "output": "nope"}
    record = {"id": "x", "scores": {"em": 1.0}, "trace": {"steps": [{"llm_calls": [
        bad, {**bad, "role": "entity_identifier:repair", "output": "still nope"},
        {"role": "thought", "messages": [], "output": "ignored role"}]}]}}
    (run / "predictions.jsonl").write_text(json.dumps(record) + "\n{torn")
    stats = export_sft(run, tmp_path / "sft")
    assert stats["examples"]["entity_identifier"] == 0 and stats["unparsed_entity_identifier"] == 1
    assert stats["bad_lines"] == 1
    with pytest.raises(DataError):
        export_sft(tmp_path / "missing", tmp_path / "sft2")


def test_cli_export_sft(run_dir, tmp_path):
    res = CliRunner().invoke(app, ["export", "sft", str(run_dir), "--out", str(tmp_path / "cli"), "--metric", "em"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "cli").iterdir()) == sorted([f"{r}.jsonl" for r in ROLE_FILES] + ["stats.json", ".tandem.json"])
