"""The QA runner: metrics files, per-question errors, resume after SIGKILL with every question once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tandem.compose import build_method
from tandem.errors import ConfigError
from tandem.eval.codecheck import CODE_FILE
from tandem.eval.runner import PREDICTIONS, load_done, run_qa
from tandem.llm import OpenAILLM
from tandem.testing.fake_llm import FakeLLM
from tandem.testing.fake_server import FakeOpenAIServer, Fault
from tandem.types import Question

QUESTIONS = [Question(f"q{i}", f"What is item {i}?", (f"item{i}",)) for i in range(12)]
CONFIG = {"method": "direct", "dataset": "synthetic", "index": None, "llm": "fake", "hyper": {}, "judge": None, "reanswer": False}


def answer_by_number(req):
    return "item" + req.last_user.split("item ")[1].split("?")[0]


def test_run_writes_predictions_metrics_and_table(tmp_path):
    llm = FakeLLM(default=lambda req: answer_by_number(req) if "item 3" not in req.last_user else "wrong")
    metrics = run_qa(build_method("direct", llm), QUESTIONS, tmp_path, CONFIG, concurrency=4)
    assert metrics["questions"] == 12 and metrics["errors"] == 0
    assert metrics["em"] == pytest.approx(11 / 12)
    assert metrics["llm_calls_per_q"] == 1.0
    lines = (tmp_path / PREDICTIONS).read_text().splitlines()
    assert sorted(json.loads(x)["id"] for x in lines) == sorted(q.id for q in QUESTIONS)
    assert json.loads(lines[0])["trace"]["steps"][0]["llm_calls"][0]["role"] == "answer"
    assert json.loads((tmp_path / "metrics.json").read_text())["em"] == pytest.approx(11 / 12)
    assert "| direct |" in (tmp_path / "metrics.md").read_text()


def test_server_failures_become_per_question_errors(tmp_path):
    faults = [Fault("500", pattern="item 1\\?"), Fault("429", pattern="item 2\\?"), Fault("garbage", pattern="item 3\\?"),
              Fault("timeout", pattern="item 4\\?", sleep_s=1.0), Fault("500", first_n=3, pattern="item 5\\?")]
    with FakeOpenAIServer(answer=lambda body: answer_by_number_body(body), faults=faults) as srv:
        llm = OpenAILLM("fake-model", srv.base_url, max_retries=3, backoff_base=0.01, backoff_max=0.05, timeout=0.3)
        metrics = run_qa(build_method("direct", llm), QUESTIONS, tmp_path, CONFIG, concurrency=4)
    records = {json.loads(x)["id"]: json.loads(x) for x in (tmp_path / PREDICTIONS).read_text().splitlines()}
    assert len(records) == 11 and "q4" not in records  # the timed-out question stays pending for the next run
    assert {k for k, r in records.items() if "error" in r} == {"q1", "q2", "q3"}
    assert "LLMError" in records["q1"]["error"]
    assert records["q5"]["prediction"] == "item5"  # recovered after 3 failures within 3 retries
    assert metrics["errors"] == 4 and metrics["answered"] == 8 and metrics["em"] == 1.0


def answer_by_number_body(body):
    last = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    return "item" + last.split("item ")[1].split("?")[0]


def test_resume_refuses_other_settings(tmp_path):
    run_qa(build_method("direct", FakeLLM(default="x")), QUESTIONS[:2], tmp_path, CONFIG)
    with pytest.raises(ConfigError, match="other settings \\(method"):
        run_qa(build_method("direct", FakeLLM(default="x")), QUESTIONS[:2], tmp_path, {**CONFIG, "method": "ircot"})


def test_resume_refuses_answers_of_other_method_code_unless_allowed(tmp_path):
    run_qa(build_method("direct", FakeLLM(default="x")), QUESTIONS[:2], tmp_path, CONFIG)
    kept = json.loads((tmp_path / CODE_FILE).read_text())
    assert "methods/direct/algorithm.py" in kept["files"] and "methods/answers.py" in kept["files"]
    assert kept["changes"] == []
    # the two saved answers were made by another version of the method's algorithm
    kept["files"]["methods/direct/algorithm.py"] = "0" * 16
    (tmp_path / CODE_FILE).write_text(json.dumps(kept))
    with pytest.raises(ConfigError, match=r"changed since its 2 saved answers.*methods/direct/algorithm\.py"):
        run_qa(build_method("direct", FakeLLM(default="x")), QUESTIONS[:4], tmp_path, CONFIG)
    assert len(load_done(tmp_path / PREDICTIONS)) == 2  # nothing answered, nothing lost
    metrics = run_qa(build_method("direct", FakeLLM(default="x")), QUESTIONS[:4], tmp_path, CONFIG,
                     allow_code_change=True)
    assert metrics["questions"] == 4
    assert metrics["code_changes"] == [{"after_questions": 2, "files": ["methods/direct/algorithm.py"]}]
    kept = json.loads((tmp_path / CODE_FILE).read_text())
    assert kept["changes"] == metrics["code_changes"] and kept["files"]["methods/direct/algorithm.py"] != "0" * 16
    (tmp_path / CODE_FILE).write_text("[1, 2]")  # damaged by hand: a clear error, not an internal one
    with pytest.raises(ConfigError, match="not what tandem writes there"):
        run_qa(build_method("direct", FakeLLM(default="x")), QUESTIONS[:4], tmp_path, CONFIG)
    # a run begun before code.json was kept resumes and keeps today's code from then on
    (tmp_path / CODE_FILE).unlink()
    run_qa(build_method("direct", FakeLLM(default="x")), QUESTIONS[:5], tmp_path, CONFIG)
    assert json.loads((tmp_path / CODE_FILE).read_text())["changes"] == []


def test_torn_last_line_is_dropped(tmp_path):
    path = tmp_path / PREDICTIONS
    path.write_text(json.dumps({"id": "q0", "scores": {}}) + "\n" + '{"id": "q1", "sco')
    assert list(load_done(path)) == ["q0"]
    assert path.read_text().endswith("}\n")


def test_retry_errors_runs_failed_questions_again(tmp_path):
    flaky = FakeLLM(default=lambda req: (_ for _ in ()).throw(RuntimeError("boom")) if "item 0" in req.last_user else "ok")
    first = run_qa(build_method("direct", flaky), QUESTIONS[:3], tmp_path, CONFIG)
    assert first["errors"] == 1
    fixed = FakeLLM(default="item0")
    again = run_qa(build_method("direct", fixed), QUESTIONS[:3], tmp_path, CONFIG, retry_errors=True)
    assert again["errors"] == 0 and len(fixed.calls) == 1
    assert len((tmp_path / PREDICTIONS).read_text().splitlines()) == 3


def test_sigkill_mid_run_then_resume_runs_every_question_once(tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        from tandem.eval.runner import run_qa
        from tandem.compose import build_method
        from tandem.testing.fake_llm import FakeLLM
        from tandem.types import Question
        qs = [Question(f"q{{i}}", f"What is item {{i}}?", (f"item{{i}}",)) for i in range(40)]
        def slow(req):
            time.sleep(float(sys.argv[1]))
            return "item" + req.last_user.split("item ")[1].split("?")[0]
        cfg = {CONFIG!r}
        run_qa(build_method("direct", FakeLLM(default=slow)), qs, {str(tmp_path)!r}, cfg, concurrency=4)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", script, "0.05"], env=env)
    path = tmp_path / PREDICTIONS
    deadline = time.time() + 60
    while (not path.exists() or len(path.read_text().splitlines()) < 10) and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = len(load_done(path))
    assert 10 <= partial < 40
    subprocess.run([sys.executable, "-c", script, "0.0"], env=env, check=True, timeout=120)
    ids = [json.loads(x)["id"] for x in path.read_text().splitlines()]
    assert len(ids) == 40 and len(set(ids)) == 40
    assert json.loads((tmp_path / "metrics.json").read_text())["em"] == 1.0


def test_report_partial_summarises_an_unfinished_run_without_touching_it(tmp_path):
    from tandem.errors import DataError
    from tandem.eval.report import load_runs

    run = tmp_path / "run"
    run.mkdir()
    rec = {"scores": {"em": 1.0, "f1": 1.0}, "gold_doc_recall": None, "llm_calls": 2, "tokens": 10, "seconds": 1.0}
    body = json.dumps({"id": "a", **rec}) + "\n" + json.dumps({"id": "b", **rec, "scores": {"em": 0.0, "f1": 0.5}}) + "\n"
    torn = '{"id": "c", "scores": {"em"'
    (run / "predictions.jsonl").write_text(body + torn, encoding="utf-8")
    with pytest.raises(DataError, match="--partial"):
        load_runs([run])
    (row,) = load_runs([run], partial=True)
    assert row["partial"] is True and row["questions"] == 2
    assert row["em"] == 0.5 and row["f1"] == 0.75 and row["llm_calls_per_q"] == 2
    assert (run / "predictions.jsonl").read_text(encoding="utf-8") == body + torn  # a run still writing is left alone
    from tandem.eval.runner import read_finished

    assert list(read_finished(run / "predictions.jsonl")) == ["a", "b"]  # what graph_retrieval.py methods reads
    assert (run / "predictions.jsonl").read_text(encoding="utf-8") == body + torn
