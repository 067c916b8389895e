"""Stopping servers: ``tandem llm serve`` leaves no vLLM behind however it is stopped (checked by
PID, with a fake vLLM that forks a worker as vLLM does); ``tandem serve`` on SIGTERM finishes the
request in flight, stops taking new ones and exits 0 (a request past the grace gets 503); an LLM server killed with ``kill -9`` mid-run
stops the run after ``--max-failures`` and a resume answers every question exactly once."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.conftest import sigint_default

from tandem.eval.runner import PREDICTIONS
from tandem.index import build_index
from tandem.testing.fake_server import FakeOpenAIServer
from tandem.types import Document

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent to reap it counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_gone(pids: list[int], timeout: float = 20.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def wait_for_line(proc: subprocess.Popen, text: str, timeout: float = 90.0) -> str:
    assert proc.stdout is not None
    deadline, seen = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        seen.append(line)
        if text in line:
            return line
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"no {text!r} in {''.join(seen)!r}")


def fake_vllm_python(tmp_path: Path) -> Path:
    """A stand-in for vLLM's Python: ``python -m vllm.entrypoints...`` runs the fake server instead."""
    script = tmp_path / "python"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -m tandem.testing.fake_server "$@"\n')
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGKILL])
def test_llm_serve_leaves_no_server_behind(tmp_path, sig):
    model, pid_file, port = tmp_path / "model", tmp_path / "pids", free_port()
    model.mkdir()
    (model / "config.json").write_text("{}")
    proc = subprocess.Popen([sys.executable, "-m", "tandem.cli", "llm", "serve", "--python", str(fake_vllm_python(tmp_path)),
                             "--model", str(model), "--port", str(port), "--vllm-arg=--pid-file", f"--vllm-arg={pid_file}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=sigint_default)
    try:
        wait_for_line(proc, "ready: --llm")
        server, worker = (int(p) for p in pid_file.read_text().split())
        assert alive(server) and alive(worker)
        proc.send_signal(sig)
        proc.wait(timeout=60)
        if sig != signal.SIGKILL:
            assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
        assert wait_gone([server, worker]) == [], f"left running after {sig.name}"
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in (int(p) for p in (pid_file.read_text().split() if pid_file.exists() else [])):
            if alive(pid):  # a failed check leaves nothing running either
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def serving(tmp_path: Path, llm: FakeOpenAIServer, grace: float) -> Iterator[tuple[subprocess.Popen, str]]:
    """``tandem serve`` (method direct, over a small index, on ``llm``) as a process, once it answers."""
    index = tmp_path / "idx"
    build_index([Document(f"d{i}", f"Title {i}", f"passage number {i} about rivers") for i in range(5)], index,
                kind="bm25")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tandem.cli", "serve", "--index", str(index), "--method", "direct",
                             "--llm", f"openai:m@{llm.base_url}", "--port", str(port), "--grace", str(grace)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield proc, base
    finally:
        if proc.poll() is None:
            proc.kill()


def ask_in_background(base: str, llm: FakeOpenAIServer) -> tuple[threading.Thread, dict]:
    """POST /v1/ask on a thread; returns once the question has reached the LLM."""
    reply: dict = {}
    ask = threading.Thread(target=lambda: reply.update(
        r=httpx.post(f"{base}/v1/ask", json={"question": "Capital of France?"}, timeout=60)))
    ask.start()
    while llm.in_flight == 0 and ask.is_alive():
        time.sleep(0.05)
    return ask, reply


def test_serve_on_sigterm_finishes_the_request_in_flight_and_exits_0(tmp_path):
    with FakeOpenAIServer(answer="Paris", latency_s=2.0) as llm, serving(tmp_path, llm, grace=20) as (proc, base):
        ask, reply = ask_in_background(base, llm)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        with pytest.raises(httpx.ConnectError):  # no new requests once stopping
            httpx.get(f"{base}/healthz", timeout=2)
        ask.join(timeout=30)
        assert reply["r"].status_code == 200 and reply["r"].json()["answer"] == "Paris"
        output, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, output
        assert "tandem serve stopped" in output


def test_serve_past_its_grace_answers_503_and_exits_0_without_a_traceback(tmp_path):
    with FakeOpenAIServer(answer="Paris", latency_s=4.0) as llm, serving(tmp_path, llm, grace=0.5) as (proc, base):
        ask, reply = ask_in_background(base, llm)
        proc.send_signal(signal.SIGTERM)
        ask.join(timeout=30)
        assert reply["r"].status_code == 503
        assert "the server stopped before this request was answered" in reply["r"].json()["error"]["message"]
        output, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, output
        assert "tandem serve stopped" in output and "Traceback" not in output, output


def test_an_llm_server_killed_mid_run_stops_the_run_and_a_resume_answers_each_question_once(tmp_path):
    dataset, run, pid_file, port = tmp_path / "items.jsonl", tmp_path / "run", tmp_path / "pids", free_port()
    dataset.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is item {i}?", "answer": f"item{i}"}) + "\n"
                               for i in range(12)))

    def start_server() -> subprocess.Popen:
        server = subprocess.Popen([sys.executable, "-m", "tandem.testing.fake_server", "--port", str(port),
                                   "--served-model-name", "m", "--latency", "0.3", "--pid-file", str(pid_file)],
                                  stdout=subprocess.PIPE, text=True)
        wait_for_line(server, "serving")
        return server

    def eval_qa() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "tandem.cli", "eval", "qa", "--method", "direct", "--dataset",
                                 str(dataset), "--llm", f"openai:m@http://127.0.0.1:{port}/v1", "--llm-opt",
                                 "backoff_base=0.01", "--max-failures", "2", "--out", str(run)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)

    server = start_server()
    first = eval_qa()
    predictions = run / PREDICTIONS
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not (predictions.exists() and predictions.read_text().count("\n") >= 3):
        time.sleep(0.05)
    server.kill()  # kill -9: no goodbye, the port refuses from now on
    server.wait()
    os.kill(int(pid_file.read_text().split()[1]), signal.SIGKILL)  # its worker too
    _, err = first.communicate(timeout=120)
    assert first.returncode == 1, err
    assert "stopped after 2 questions in a row could not reach the LLM server" in " ".join(err.split())
    answered = [json.loads(line)["id"] for line in predictions.read_text().splitlines()]
    assert 3 <= len(answered) < 12
    server = start_server()
    try:
        second = eval_qa()
        _, err = second.communicate(timeout=120)
        assert second.returncode == 0, err
    finally:
        server.terminate()
        server.wait()
    ids = [json.loads(line)["id"] for line in predictions.read_text().splitlines()]
    assert sorted(ids) == sorted(f"q{i}" for i in range(12))  # every question, each exactly once
    assert all("error" not in json.loads(line) for line in predictions.read_text().splitlines())
