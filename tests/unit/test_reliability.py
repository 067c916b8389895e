"""Faults and bad input (docs/reliability.md): one test per case of the fault matrix.

CLI cases run ``python -m tandem.cli`` in a subprocess, as a user would, and check the exit code,
the message, and what is left on disk."""

from __future__ import annotations

import itertools
import json
import os
import pickle
import signal
import subprocess
import sys
import time

import pytest
from tests.conftest import ROOT, closed_port_url, shared, sigint_default, tandem

from tandem.compose import build_method
from tandem.corpus import load_corpus
from tandem.errors import ConfigError, DataError, LLMError, RunError
from tandem.eval.retrieval import check_gold_coverage
from tandem.eval.runner import ERRORS_LOG, PREDICTIONS, load_done, run_qa
from tandem.index.store import DocStore
from tandem.io import ReadStats
from tandem.llm.base import CHARS_PER_TOKEN, LLMRequest
from tandem.llm.openai_compat import OpenAILLM
from tandem.testing.fake_llm import FakeLLM
from tandem.testing.fake_server import FakeOpenAIServer, Fault
from tandem.types import Document, Question

KEY = "sk-test-7f3a9c1e5b2d4f60"
QUESTIONS = [Question(f"q{i}", f"What is item {i}?", (f"item{i}",)) for i in range(8)]
CONFIG = {"method": "direct", "dataset": "items.jsonl", "llm": "fake"}


def popen(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tandem.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, preexec_fn=sigint_default)


# -- secrets -----------------------------------------------------------------------------------

def test_bad_url_is_one_line_config_error_without_the_key():
    res = tandem("ask", "--method", "direct", "--llm", "openai:m@http://127.0.0.1:abc/v1", "What?",
                 env={"OPENAI_API_KEY": KEY})
    assert res.returncode == 2, res.stderr
    assert "invalid LLM base URL" in res.stderr and "Invalid port" in res.stderr
    assert "Traceback" not in res.stderr
    assert KEY not in res.stdout + res.stderr


def test_a_server_echoing_the_key_leaks_it_nowhere(tmp_path):
    data = shared("fixtures/hotpot_example.jsonl")
    with FakeOpenAIServer(faults=[Fault("echo_auth")]) as srv:
        res = tandem("eval", "qa", "--method", "direct", "--dataset", str(data), "--limit", "2",
                     "--llm", f"openai:m@{srv.base_url}", "--out", str(tmp_path / "run"), env={"OPENAI_API_KEY": KEY})
    assert res.returncode == 1, res.stderr  # every question failed
    assert "every question failed" in res.stderr
    written = "".join(p.read_text(errors="replace") for p in (tmp_path / "run").rglob("*") if p.is_file()
                      and not p.name.startswith("llm-cache"))
    assert "Bearer ***" in written  # the error is recorded, redacted
    assert KEY not in res.stdout + res.stderr + written


# -- Ctrl-C ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_ctrl_c_or_a_stop_signal_in_eval_qa_writes_partial_metrics_and_exits_128_plus_it(tmp_path, sig, code):
    calls = itertools.count()

    def answer(body):
        if next(calls) >= 3:
            time.sleep(20)  # the rest hang until the user gives up
        return "x"

    run = tmp_path / "run"
    with FakeOpenAIServer(answer=answer) as srv:
        proc = popen("eval", "qa", "--method", "direct", "--dataset", str(shared("fixtures/hotpot_example.jsonl")),
                     "--llm", f"openai:m@{srv.base_url}", "--llm-opt", "json_mode=prompt", "--concurrency", "2",
                     "--out", str(run))
        deadline = time.time() + 60
        while time.time() < deadline and len(load_done(run / PREDICTIONS) if (run / PREDICTIONS).exists() else {}) < 3:
            time.sleep(0.1)
        time.sleep(0.5)
        proc.send_signal(sig)  # Ctrl-C; or a kill, timeout, a batch scheduler or a closed terminal
        _, err = proc.communicate(timeout=15)  # in-flight requests do not hold the process up
    assert proc.returncode == code, err
    assert "interrupted" in err and (sig == signal.SIGINT or signal.Signals(sig).name in err)
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["partial"] is True and metrics["questions"] == 3 and metrics["pending"] == 7
    assert srv.count <= 6  # queued questions were not sent after the interrupt


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the dropped interrupt, reported
def test_a_stop_signal_lost_in_a_finalizer_stops_the_work_at_its_next_progress_report(sig, monkeypatch):
    from tandem import interrupts
    from tandem.cli.common import progress_bar

    monkeypatch.setattr(signal, "getsignal", lambda s: signal.default_int_handler)  # as in a command's process

    class Garbage:
        def __del__(self):  # the signal lands here, as in a library's finalizer during an import
            os.kill(os.getpid(), sig)
            for _ in range(100_000):
                pass

    with interrupts.stop_signals(), progress_bar(delay=60) as bar:
        on_progress = bar.callback("encode")
        on_progress(1, 3)
        Garbage()  # its interrupt was raised in the finalizer and Python dropped it ("Exception ignored in")
        assert interrupts.received == [sig]  # the work goes on: here
        with pytest.raises(KeyboardInterrupt) as raised:
            on_progress(2, 3)
        on_progress(3, 3)  # raised once: the work's own unwinding may report on
    assert (type(raised.value) is KeyboardInterrupt) == (sig == signal.SIGINT)
    assert interrupts.exit_code() == 128 + sig


# -- dead, hanging and broken servers --------------------------------------------------------------

def test_connection_refused_fails_after_one_quick_retry(caplog):
    llm = OpenAILLM("m", closed_port_url(), backoff_base=0.01)
    with pytest.raises(LLMError, match="after 2 attempt\\(s\\).*cannot connect") as info:
        llm.complete(LLMRequest.from_prompt("hi"))
    assert info.value.unreachable
    assert "retry 1 of 1" in caplog.text  # every retry is logged


def test_a_hanging_server_costs_two_timeouts_by_default_and_the_budget_is_settable():
    with FakeOpenAIServer(latency_s=3.0) as srv:
        with pytest.raises(LLMError, match="after 2 attempt\\(s\\).*timeout"):
            OpenAILLM("m", srv.base_url, timeout=0.2, backoff_base=0.01).complete(LLMRequest.from_prompt("hi"))
        assert srv.count == 2
        with pytest.raises(LLMError, match="after 1 attempt\\(s\\)"):
            OpenAILLM("m", srv.base_url, timeout=0.2, timeout_retries=0).complete(LLMRequest.from_prompt("hi"))


def test_eval_against_a_dead_server_stops_early_and_exits_1(tmp_path):
    run = tmp_path / "run"
    res = tandem("eval", "qa", "--method", "direct", "--dataset", str(shared("fixtures/hotpot_example.jsonl")),
                 "--llm", f"openai:m@{closed_port_url()}", "--llm-opt", "backoff_base=0.01", "--out", str(run))
    assert res.returncode == 1, res.stderr
    assert "stopped after 3 questions in a row could not reach the LLM server" in res.stderr
    assert load_done(run / PREDICTIONS) == {}  # nothing recorded as done: a re-run retries them all
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["partial"] is True and metrics["errors"] == 3


def test_eval_against_a_server_too_slow_for_the_timeout_says_how_to_give_it_longer(tmp_path):
    with FakeOpenAIServer(latency_s=2.0) as srv:
        res = tandem("eval", "qa", "--method", "direct", "--dataset", str(shared("fixtures/hotpot_example.jsonl")),
                     "--llm", f"openai:m@{srv.base_url}", "--llm-opt", "timeout=0.2", "--llm-opt", "backoff_base=0.01",
                     "--out", str(tmp_path / "run"))
    assert res.returncode == 1, res.stderr
    err = " ".join(res.stderr.split())
    assert "stopped after 3 questions in a row could not reach the LLM server" in err
    assert "give each reply longer: --llm-opt timeout=SECONDS" in err


def test_malformed_replies_are_per_question_errors_and_the_run_goes_on(tmp_path):
    faults = [Fault("null_choice", pattern="item 1\\?"), Fault("bad_gzip", pattern="item 2\\?")]
    with FakeOpenAIServer(answer="ok", faults=faults) as srv:
        llm = OpenAILLM("m", srv.base_url, max_retries=1, backoff_base=0.01, json_mode="prompt")
        metrics = run_qa(build_method("direct", llm), QUESTIONS, tmp_path, CONFIG, concurrency=2)
    done = load_done(tmp_path / PREDICTIONS)
    assert "choices[0] is NoneType" in done["q1"]["error"]
    assert "unreadable body (DecodingError" in done["q2"]["error"]
    assert metrics["errors"] == 2 and metrics["answered"] == 6


def test_any_exception_in_one_question_is_recorded_with_its_traceback_in_the_log(tmp_path):
    def answer(req):
        if "item 4" in req.last_user:
            raise TypeError("a bug inside one question")
        return "ok"

    metrics = run_qa(build_method("direct", FakeLLM(default=answer)), QUESTIONS, tmp_path, CONFIG, concurrency=2)
    done = load_done(tmp_path / PREDICTIONS)
    assert done["q4"]["error"] == "TypeError: a bug inside one question" and "traceback" not in done["q4"]
    assert "question q4" in (tmp_path / ERRORS_LOG).read_text() and "Traceback" in (tmp_path / ERRORS_LOG).read_text()
    assert metrics["errors"] == 1 and metrics["answered"] == 7


def test_every_question_failing_is_a_run_error_exit_1(tmp_path):
    res = tandem("eval", "qa", "--method", "direct", "--dataset", str(shared("fixtures/hotpot_example.jsonl")),
                 "--limit", "2", "--llm", "openai:m@http://127.0.0.1:1/v1", "--max-failures", "0",
                 "--llm-opt", "backoff_base=0.01", "--out", str(tmp_path / "run"))
    assert res.returncode == 1 and "every question failed (2 of 2)" in res.stderr


# -- code execution ------------------------------------------------------------------------------

class _Payload:
    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


def test_a_pickle_payload_in_trainer_state_is_refused(tmp_path):
    from tandem.methods.r2ag.former import TRAINER_FILE, load_trainer_state

    pwned = tmp_path / "pwned"
    (tmp_path / TRAINER_FILE).write_bytes(pickle.dumps({"step": 1, "x": _Payload(str(pwned))}))
    with pytest.raises(ConfigError, match="refusing to load"):
        load_trainer_state(tmp_path)
    assert not pwned.exists()


# -- silent zero ----------------------------------------------------------------------------------

def test_retrieval_eval_over_a_foreign_index_is_an_error_not_a_zero(tmp_path):
    store = DocStore([Document("other-1", "T", "text"), Document("other-2", "U", "more")])
    qs = [Question("a", "?", ("x",), ("g1", "g2")), Question("b", "?", ("y",), ("g3",))]
    with pytest.raises(DataError, match="only 0 of the 3 gold passage ids"):
        check_gold_coverage(qs, store, 0.5, "idx")
    assert check_gold_coverage(qs, store, 0.0, "idx") == 0.0
    res = tandem("index", "--corpus", "examples/demo_corpus", "--kind", "bm25", "--out", str(tmp_path / "idx"))
    assert res.returncode == 0, res.stderr
    res = tandem("eval", "retrieval", "--dataset", str(shared("fixtures/hotpot_example.jsonl")), "--index",
                 str(tmp_path / "idx"), "--any-corpus", "--out", str(tmp_path / "run"))
    assert res.returncode == 2 and "gold passage ids" in res.stderr and "--min-gold-share" in res.stderr


# -- oversized input ------------------------------------------------------------------------------

def test_a_huge_jsonl_document_is_chunked_with_its_id_kept(tmp_path):
    words = " ".join(f"w{i}" for i in range(700_000))  # ~5 MB in one record
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps({"id": "big", "title": "Big", "text": words}) + "\n"
                    + json.dumps({"id": "small", "title": "S", "text": "short text"}) + "\n")
    assert path.stat().st_size > 5_000_000
    docs = load_corpus(path)
    big = [d for d in docs if d.metadata.get("source_id") == "big"]
    assert len(big) > 3000 and all(len(d.text.split()) <= 200 for d in docs)
    assert big[0].id == "big#0" and [d.id for d in docs][-1] == "small"


def test_a_prompt_over_the_context_window_is_cut_by_the_rule_and_recorded():
    huge = Document("h", "Huge", "lorem ipsum " * 100_000)
    llm = FakeLLM(default="Paris", context_window=2048)
    method = build_method("oracle", llm, None, DocStore([huge]))
    answer = method.answer(Question("q", "What is the capital of France?", ("Paris",), ("h",)))
    sent = llm.calls[0]
    call = answer.trace.llm_calls[0]
    assert sum(len(m.content) for m in sent.messages) <= (2048 - sent.max_tokens) * CHARS_PER_TOKEN
    assert call.cut_chars > 1_000_000 and call.to_dict()["cut_chars"] == call.cut_chars
    assert sent.last_user.rstrip().endswith("Answer:") and "What is the capital of France?" in sent.last_user
    assert "characters cut to fit the model's context window" in sent.last_user


@pytest.mark.parametrize("sizes", [[400] * 21, [20_000], [50, 90_000, 3_000], [5_000, 5_000, 5_000]])
def test_the_cut_always_fits_and_keeps_the_question(sizes):
    from tandem.llm.base import Message, fit_to_context

    question = "Question: " + "which city? " * 30 + "Answer:"
    msgs = [Message("user", "x" * n) for n in sizes[:-1]] + [Message("user", "y" * sizes[-1] + question)]
    req = LLMRequest(tuple(msgs), max_tokens=16, json_schema={"type": "object"})
    fitted, cut = fit_to_context(req, 800)
    assert cut > 0 and sum(len(m.content) for m in fitted.messages) + 100 <= (800 - 16) * CHARS_PER_TOKEN  # + schema note
    assert fitted.messages[-1].content.endswith(question)
    with pytest.raises(ConfigError, match="cannot fit"):
        fit_to_context(req, 20)


def test_skip_bad_counts_for_folders_and_json_arrays(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.txt").write_text("Warsaw is the capital of Poland.")
    (folder / "bad.txt").write_bytes(b"caf\xe9 latin-1")
    with pytest.raises(DataError, match="bad.txt:1: not valid UTF-8"):
        load_corpus(folder)
    stats = ReadStats()
    assert [d.id for d in load_corpus(folder, skip_bad=True, stats=stats)] == ["good.txt#0"] and stats.skipped == 1
    array = tmp_path / "corpus.json"
    array.write_text(json.dumps([{"id": "a", "title": "A", "text": "x"}, "not an object"]))
    stats = ReadStats()
    assert len(load_corpus(array, skip_bad=True, stats=stats)) == 1 and stats.skipped == 1
    res = tandem("index", "--corpus", str(folder), "--kind", "bm25", "--skip-bad", "--out", str(tmp_path / "idx"))
    assert res.returncode == 0, res.stderr
    assert "skipped 1 bad records" in res.stderr


def test_eval_qa_takes_skip_bad_and_says_how_many(tmp_path):
    data = tmp_path / "data.jsonl"
    lines = shared("fixtures/hotpot_example.jsonl").read_text().splitlines()[:3]
    data.write_text(lines[0] + "\n{broken\n" + lines[1] + "\n")
    res = tandem("eval", "qa", "--method", "direct", "--dataset", str(data), "--llm", "fake:x", "--out",
                 str(tmp_path / "run"))
    assert res.returncode == 2 and "data.jsonl:2: malformed JSON" in res.stderr
    res = tandem("eval", "qa", "--method", "direct", "--dataset", str(data), "--llm", "fake:x", "--skip-bad", "--out",
                 str(tmp_path / "run"))
    assert res.returncode == 0, res.stderr
    assert "skipped 1 bad records" in res.stderr and len(load_done(tmp_path / "run" / PREDICTIONS)) == 2


def test_exit_codes_of_the_error_classes():
    assert RunError("x").exit_code == 1 and LLMError("x").exit_code == 1
    assert ConfigError("x").exit_code == 2 and DataError("x").exit_code == 2


def test_methods_lists_settings_and_a_misspelt_setting_names_the_valid_ones(tmp_path):
    res = tandem("methods", "dualrag", "--json")
    assert res.returncode == 0, res.stderr
    settings = json.loads(res.stdout)["settings"]
    assert settings["max_iter"] == {"default": 5, "type": "int", "doc": "reasoning steps (paper: 5)"}
    res = tandem("ask", "--method", "direct", "--llm", "fake:x", "--set", "max_itr=3", "What?")
    assert res.returncode == 2 and "unknown setting 'max_itr'; valid settings: ['max_tokens', 'temperature']" in res.stderr
    res = tandem("ask", "--method", "direct", "--llm", "fake:x", "--set", "max_tokens=many", "What?")
    assert res.returncode == 2 and "setting 'max_tokens': Input should be a valid integer" in res.stderr
    assert tandem("--version").stdout.startswith("tandem ")
