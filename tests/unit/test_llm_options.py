"""--llm-opt parsing and routing, and protocol health in a run's metrics."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tandem.cli import app
from tandem.errors import ConfigError
from tandem.eval.runner import run_qa
from tandem.index import build_index, open_index
from tandem.llm.options import parse_pairs, split_llm_options
from tandem.methods import Search
from tandem.methods.dualrag import DualRAG
from tandem.methods.dualrag.settings import DualRAGSettings
from tandem.retrieve import open_retriever
from tandem.testing.fake_llm import FakeLLM
from tandem.types import Question


def test_options_go_to_the_backend_or_the_method():
    backend, method = split_llm_options("local", parse_pairs(["json_mode=prompt", "temperature=0.3",
                                                               "max_tokens.reasoner=512"]), "dualrag")
    assert backend == {"json_mode": "prompt"} and method == {"temperature": 0.3, "max_tokens": {"reasoner": 512}}
    backend, method = split_llm_options("openai:m@http://h/v1", parse_pairs(["timeout=30", "max_tokens=16"]), "ircot")
    assert backend == {"timeout": 30} and method == {"max_tokens": 16}
    with pytest.raises(ConfigError, match=r"unknown --llm-opt 'timeout'.*valid keys: \['answer_style', 'dtype', 'dynamic_quantization', 'engine', 'engine_process', 'json_mode'"):
        split_llm_options("local", {"timeout": 3}, "dualrag")
    with pytest.raises(ConfigError, match="max_tokens.ROLE"):
        split_llm_options("local", {"max_tokens": 3}, "dualrag")  # roles: the per-role form
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_pairs(["json_mode"])


def test_cli_rejects_a_wrong_key_with_the_valid_ones(tmp_path):
    data = tmp_path / "qa.jsonl"
    data.write_text(json.dumps({"question": "Q?", "answer": "A"}) + "\n")
    result = CliRunner().invoke(app, ["eval", "qa", "--method", "direct", "--dataset", str(data), "--llm", "fake:A",
                                      "--out", str(tmp_path / "run"), "--llm-opt", "jsn_mode=schema"])
    assert result.exit_code != 0 and "valid keys" in str(result.exception)
    ok = CliRunner().invoke(app, ["eval", "qa", "--method", "direct", "--dataset", str(data), "--llm", "fake:A",
                                  "--out", str(tmp_path / "run2"), "--llm-opt", "constrains_json=true",
                                  "--llm-opt", "max_tokens=8"])
    assert ok.exit_code == 0, ok.output
    config = json.loads((tmp_path / "run2" / "config.json").read_text())
    assert config["llm"] == {"spec": "fake:A", "options": {"constrains_json": True}}
    assert config["settings"] == {"temperature": 0.0, "max_tokens": 8}  # resolved: defaults included


def test_run_metrics_report_protocol_health(tmp_path, small_docs):
    build_index(small_docs, tmp_path / "idx", kind="bm25")
    idx = open_index(tmp_path / "idx")
    think = json.dumps({"thought": "Warsaw is on the Vistula.", "need_retrieve": False})
    llm = FakeLLM(rules=[("You are the reasoning half", "not json at all")], default="Vistula", constrains_json=True)
    llm.rules.append(("Reply again", think))  # the repair round parses
    questions = [Question("a", "Which river?", ("Vistula",)), Question("b", "Which river again?", ("Vistula",))]
    metrics = run_qa(DualRAG(llm, Search(open_retriever(idx), idx.store), DualRAGSettings(knowledge_first=False)), questions, tmp_path / "run",
                     {"method": "dualrag", "dataset": "t"})
    assert metrics["structured_calls"] == 2 and metrics["parse_rate"] == 0.0 and metrics["fallback_rate"] == 0.0
    assert metrics["protocol"]["reasoner"] == {"calls": 2, "schema_decoded": 2, "parsed_first": 0, "repaired": 2,
                                               "fell_back": 0}
    broken = FakeLLM(rules=[("You are the reasoning half", "never json")], default="Vistula")
    metrics = run_qa(DualRAG(broken, Search(open_retriever(idx), idx.store), DualRAGSettings(max_iter=1)), questions[:1],
                     tmp_path / "run2", {"method": "dualrag", "dataset": "t"})
    assert metrics["fallback_rate"] == 1.0 and metrics["schema_decoded_rate"] == 0.0
    record = json.loads((tmp_path / "run2" / "predictions.jsonl").read_text().splitlines()[0])
    calls = record["trace"]["steps"][0]["llm_calls"]
    assert [c["outcome"] for c in calls] == [None, "fallback"] and calls[1]["role"] == "reasoner:repair"
