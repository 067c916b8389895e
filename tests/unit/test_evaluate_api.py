"""``tandem.evaluate`` is the run ``tandem eval qa`` makes: the same config gives the same predictions."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests.conftest import shared

import tandem
from tandem.errors import ConfigError
from tandem.index import build_index


@pytest.fixture
def setup(tmp_path):
    from tandem.corpus import load_dataset

    data = shared("fixtures/hotpot_example.jsonl")
    build_index(load_dataset(data).passages, tmp_path / "idx", kind="bm25")
    return data, tmp_path / "idx"


def test_evaluate_from_python_equals_eval_qa(setup, tmp_path):
    data, index = setup
    config = {"method": "ircot", "dataset": str(data), "index": str(index), "llm": {"spec": "fake:Warsaw"},
              "settings": {"max_steps": 2}, "limit": 4}
    seen = []
    metrics = tandem.evaluate(config, tmp_path / "py", on_record=lambda rec, running: seen.append(rec["id"]))
    assert metrics["questions"] == 4 and len(seen) == 4 and metrics["llm_calls_per_q"] >= 1
    run = subprocess.run([sys.executable, "-m", "tandem.cli", "-q", "eval", "qa", "--config",
                          str(tmp_path / "py" / "config.json"), "--out", str(tmp_path / "cli")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr

    def answers(folder):
        rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
        return {r["id"]: r["prediction"] for r in rows}

    assert answers(tmp_path / "py") == answers(tmp_path / "cli")
    more = []
    again = tandem.evaluate(tmp_path / "py" / "config.json", tmp_path / "py",  # resumes: nothing left to answer
                            on_record=lambda rec, running: more.append(rec["id"]))
    assert again["questions"] == 4 and more == []
    assert len((tmp_path / "py" / "predictions.jsonl").read_text().splitlines()) == 4


def test_evaluate_refuses_a_bad_config_naming_the_key(setup, tmp_path):
    data, index = setup
    with pytest.raises(ConfigError, match="unknown setting 'max_stepz'"):
        tandem.evaluate({"method": "ircot", "dataset": str(data), "index": str(index), "llm": {"spec": "fake:x"},
                         "settings": {"max_stepz": 2}}, tmp_path / "run")
    with pytest.raises(ConfigError, match="method 'ircot' retrieves: give --index DIR"):
        tandem.evaluate({"method": "ircot", "dataset": str(data), "llm": {"spec": "fake:x"}}, tmp_path / "run2")


def test_a_run_resumes_from_another_folder_with_other_spellings_of_its_files(setup, tmp_path, monkeypatch):
    data, index = setup
    (tmp_path / "elsewhere").mkdir()
    config = {"method": "ircot", "llm": {"spec": "fake:Warsaw"}, "settings": {"max_steps": 2}}
    monkeypatch.chdir(tmp_path)  # started as --index idx from the folder above it
    tandem.evaluate({**config, "dataset": str(data), "index": "idx", "limit": 2}, tmp_path / "run")
    notes = json.loads((tmp_path / "run" / "config.json").read_text())["notes"]
    assert notes["index_path"] == str(index.resolve()) and notes["dataset_path"] == str(data.resolve())
    monkeypatch.chdir(tmp_path / "elsewhere")  # resumed as --index ../idx
    more = []
    metrics = tandem.evaluate({**config, "dataset": str(data), "index": "../idx", "limit": 4}, tmp_path / "run",
                              on_record=lambda rec, running: more.append(rec["id"]))
    assert metrics["questions"] == 4 and len(more) == 2  # the two saved answers kept, two more asked
    build_index(tandem.corpus.load_dataset(data).passages, tmp_path / "idx2", kind="bm25")
    with pytest.raises(ConfigError, match=r"other settings \(index\)"):  # another index is still another run
        tandem.evaluate({**config, "dataset": str(data), "index": "../idx2", "limit": 4}, tmp_path / "run")
