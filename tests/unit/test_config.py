"""Typed configuration: settings models, run configs from files, and a run folder's config.json re-running
the same run."""

from __future__ import annotations

import json

import pytest
from tests.conftest import shared
from typer.testing import CliRunner

from tandem.cli import app
from tandem.compose import build_method
from tandem.config import RunConfig, read_config_file
from tandem.errors import ConfigError
from tandem.eval.runner import PREDICTIONS
from tandem.methods.dualrag.settings import DualRAGSettings
from tandem.registry import METHODS
from tandem.testing.fake_llm import FakeLLM


def test_every_method_documents_every_setting_and_round_trips():
    for entry in METHODS.entries():
        name, model, described = entry.name, entry.settings, entry.describe()
        assert described and all(info["doc"] for info in described.values()), name
        if name != "r2ag":  # r2ag's checkpoint is required at build time, not by the model
            defaults = model().to_dict()
            assert model.from_dict(defaults) == model() and set(defaults) == set(described)
    assert METHODS.get("dualrag").describe()["max_iter"]["default"] == 5


def test_settings_errors_name_the_key_and_the_valid_ones():
    with pytest.raises(ConfigError, match=r"unknown setting 'max_itr'; valid settings: \['answer_docs'"):
        DualRAGSettings.from_dict({"max_itr": 3})
    with pytest.raises(ConfigError, match="setting 'max_iter': Input should be greater than or equal to 1"):
        DualRAGSettings.from_dict({"max_iter": 0})
    with pytest.raises(ConfigError, match=r"unknown DualRAG role\(s\) \['planner'\]"):
        DualRAGSettings.from_dict({"role_llms": {"planner": "local"}})
    with pytest.raises(ConfigError, match="k \\(9\\) must not exceed candidates \\(4\\)"):
        build_method("cooprag", FakeLLM(), settings={"n": 4, "k": 9})
    assert DualRAGSettings().replace(max_iter=3).max_iter == 3


def test_run_config_resolves_settings_and_reads_legacy_folders():
    cfg = RunConfig.from_dict({"method": "ircot", "dataset": "d.jsonl", "settings": {"k": 2}})
    assert cfg.settings == {"k": 2, "candidates": 50, "max_steps": 5, "policy": "replace", "temperature": 0.0,
                            "max_tokens": 64, "reranker": "none", "reranker_model": None, "min_score": 0.0,
                            "first_stage": "index"}
    assert RunConfig.from_dict(cfg.to_dict()) == cfg
    legacy = RunConfig.from_dict({"task": "qa", "method": "ircot", "dataset": "d.jsonl", "llm": "fake:x",
                                  "llm_opts": {"constrains_json": True}, "hyper": {"k": 2}})
    assert legacy.llm.spec == "fake:x" and legacy.llm.options == {"constrains_json": True} and legacy.settings == cfg.settings
    with pytest.raises(ConfigError, match=r"unknown setting 'datset'; valid settings: \["):
        RunConfig.from_dict({"method": "ircot", "datset": "d.jsonl"})


def test_config_files_name_the_line_of_a_syntax_error(tmp_path):
    bad = tmp_path / "run.yaml"
    bad.write_text("method: ircot\nsettings: {k: 2\nlimit: 3\n")
    with pytest.raises(ConfigError, match=r"run\.yaml:\d+: not valid YAML"):
        read_config_file(bad)
    listing = tmp_path / "run.json"
    listing.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="holds a mapping of settings, got list"):
        read_config_file(listing)


def _predictions(folder) -> list[dict]:
    rows = [json.loads(line) for line in (folder / PREDICTIONS).read_text().splitlines()]
    for row in rows:  # timings differ between runs; everything else must not
        row.pop("seconds", None)
        for step in row["trace"]["steps"]:
            for call in step["llm_calls"]:
                call.pop("latency_s", None)
    return sorted(rows, key=lambda r: r["id"])


def test_a_run_folders_config_reruns_the_same_run_and_flags_override_a_yaml_file(tmp_path):
    data = shared("fixtures/hotpot_example.jsonl")
    cli = CliRunner()
    res = cli.invoke(app, ["index", "--dataset", str(data), "--kind", "bm25", "--out", str(tmp_path / "idx")])
    assert res.exit_code == 0, res.output
    first = ["eval", "qa", "--method", "ircot", "--dataset", str(data), "--index", str(tmp_path / "idx"),
             "--llm", "fake:Marie Curie", "--set", "k=2", "--set", "max_steps=2", "--limit", "4", "--no-cache"]
    res = cli.invoke(app, [*first, "--out", str(tmp_path / "r1")])
    assert res.exit_code == 0, res.output
    again = cli.invoke(app, ["eval", "qa", "--config", str(tmp_path / "r1" / "config.json"), "--out", str(tmp_path / "r2")])
    assert again.exit_code == 0, again.output
    one, two = _predictions(tmp_path / "r1"), _predictions(tmp_path / "r2")
    assert len(one) == 4 and one == two
    assert all(len(step["hits"]) == 2 for row in one for step in row["trace"]["steps"] if step["hits"])  # k=2 held
    assert json.loads((tmp_path / "r2" / "config.json").read_text())["settings"]["max_steps"] == 2

    (tmp_path / "run.yaml").write_text(f"method: ircot\ndataset: {data}\nindex: {tmp_path / 'idx'}\n"
                                       "llm: {spec: 'fake:Warsaw'}\nsettings: {k: 3}\nlimit: 4\ncache: false\n")
    res = cli.invoke(app, ["eval", "qa", "--config", str(tmp_path / "run.yaml"), "--limit", "2", "--set", "max_steps=1",
                           "--out", str(tmp_path / "r3")])
    assert res.exit_code == 0, res.output
    config = json.loads((tmp_path / "r3" / "config.json").read_text())
    assert config["limit"] == 2 and config["settings"]["k"] == 3 and config["settings"]["max_steps"] == 1
    assert len(_predictions(tmp_path / "r3")) == 2


def test_public_api_indexes_plain_texts_and_asks_in_three_lines(tmp_path):
    import tandem

    index = tandem.index_documents(["Marie Curie was born in Warsaw.", "Warsaw is the capital of Poland.",
                                    "Marie Curie was born in Warsaw."], tmp_path / "idx", kind="bm25")
    answer = tandem.ask("Where was Marie Curie born?", index, method="naive_rag", llm="fake:Warsaw", k=2)
    assert answer.text == "Warsaw"
    ids = [h.doc_id for h in answer.trace.steps[0].hits]
    assert sorted(ids) == [ids[0].split("#")[0], ids[0].split("#")[0] + "#1"]  # hashed ids; the duplicate got a suffix
    assert {d.id for d in tandem.as_documents(["x", "x"])} == {tandem.as_documents(["x"])[0].id, tandem.as_documents(["x"])[0].id + "#1"}
    with pytest.raises(ConfigError, match="unknown setting 'kk'"):
        tandem.ask("Where?", index, method="naive_rag", llm="fake:x", kk=2)


def test_naive_rag_takes_a_reranker_by_name(small_docs, tmp_path):
    from tandem.index import build_index, open_index
    from tandem.methods.base import Search
    from tandem.rerank import BiEncoderReranker
    from tandem.retrieve import open_retriever
    from tandem.testing.encoders import HashingEncoder
    from tandem.types import Question

    build_index(small_docs, tmp_path / "idx", kind="hybrid", encoder=HashingEncoder())
    idx = open_index(tmp_path / "idx")
    idx.__dict__["encoder"] = HashingEncoder()  # the test encoder is not loadable by name
    method = build_method("naive_rag", FakeLLM(default="Warsaw"), Search(open_retriever(idx), idx.store),
                          reranker="bi_encoder", k=2, candidates=4)
    assert isinstance(method.reranker, BiEncoderReranker)
    answer = method.answer(Question("q", "Where was Marie Curie born?"))
    assert answer.text == "Warsaw" and len(answer.trace.steps[0].hits) == 2


def test_paper_preset_sets_the_controlled_comparison_under_explicit_settings(tmp_path):
    data = shared("fixtures/hotpot_example.jsonl")
    cli = CliRunner()
    assert cli.invoke(app, ["index", "--dataset", str(data), "--kind", "bm25", "--out", str(tmp_path / "idx")]).exit_code == 0
    res = cli.invoke(app, ["eval", "qa", "--preset", "paper", "--method", "ircot", "--dataset", str(data), "--index",
                           str(tmp_path / "idx"), "--llm", "fake:So the answer is: Warsaw.", "--set", "k=3",
                           "--limit", "2", "--no-cache", "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["preset"] == "paper" and config["reanswer"] is True and config["judge"] == "fake:So the answer is: Warsaw."
    assert {k: config["settings"][k] for k in ("candidates", "reranker", "temperature", "k")} == {
        "candidates": 50, "reranker": "bi_encoder", "temperature": 0.3, "k": 3}  # --set k=3 wins over the preset's 10
    rows = _predictions(tmp_path / "run")
    assert all(len(step["hits"]) == 3 for row in rows for step in row["trace"]["steps"] if step["hits"])
    assert config["settings"]["first_stage"] == "bm25" and config["reanswer_prompt"] == "answer_type"
    assert config["notes"]["rerank"] == "bm25 first stage, then bi_encoder"
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert "judge" in metrics and metrics["judge_calibration"]["self_judged"] is True
    assert metrics["judge_calibration"]["yes_on_gold"] == 0.0  # this fake judge never says Yes
    with pytest.raises(ConfigError, match=r"unknown preset 'papr'; presets: \['paper'\]"):
        from tandem.methods.presets import preset

        preset("papr", "ircot")


def test_a_graph_run_records_its_retriever_settings_resolved():
    from tandem.cli.common import run_config
    from tandem.retrieve.graph import GraphStageSettings

    cfg = run_config(None, method="naive_rag", retriever="graph", retriever_opt=["seeds=5"])
    assert cfg.retriever.settings == {**GraphStageSettings().to_dict(), "seeds": 5}
    assert cfg.retriever.settings["damping"] == 0.5 and cfg.retriever.settings["ranker"] == "learned-v2"
    assert {"expand_hits", "expand_weight", "hub_damping", "ranker", "rerank_depth", "entity_hits"} <= set(cfg.retriever.settings)
    assert run_config(None, method="naive_rag", retriever="hybrid").retriever.settings == {}
