"""A tiny OpenAI-compatible chat server on 127.0.0.1 for tests and benchmarks.

``POST /v1/chat/completions`` answers with a scripted function after a fixed latency; faults
(HTTP 500 / 429, a sleep past the client's timeout, a garbage body, a dropped connection) can be
injected for the first N requests or for prompts matching a pattern. It counts requests and the
largest number in flight at once, so tests can check a client's concurrency bound::

    with FakeOpenAIServer(answer="Paris", latency_s=0.05, faults=[Fault("500", first_n=2)]) as srv:
        llm = OpenAILLM("fake-model", srv.base_url, backoff_base=0.01)
        llm.complete(LLMRequest.from_prompt("capital of France?"))   # 2 retries, then "Paris"
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAULT_KINDS = ("500", "429", "timeout", "garbage", "drop", "null_choice", "bad_gzip", "echo_auth")


@dataclass
class Fault:
    """One injected failure.

    ``kind``: ``"500"``, ``"429"``, ``"timeout"`` (sleep ``sleep_s`` before answering normally),
    ``"garbage"`` (HTTP 200 with a non-JSON body), ``"drop"`` (close the connection unanswered),
    ``"null_choice"`` (HTTP 200 ``{"choices": [null]}``), ``"bad_gzip"`` (HTTP 200 declaring a gzip body
    that is not gzip), ``"echo_auth"`` (HTTP 401 whose body repeats the request's Authorization header).
    Applies to the first ``first_n`` requests it sees (all when None) whose last user message
    matches ``pattern`` (a regex; all when None).
    """

    kind: str
    first_n: int | None = None
    pattern: str | None = None
    sleep_s: float = 2.0
    seen: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; kinds: {sorted(FAULT_KINDS)}")

    def claims(self, prompt: str) -> bool:
        """Whether this fault hits a request with this prompt (counts it if so)."""
        if self.pattern is not None and not re.search(self.pattern, prompt):
            return False
        if self.first_n is not None and self.seen >= self.first_n:
            return False
        self.seen += 1
        return True


def echo_answer(body: dict[str, Any]) -> str:
    """Default answer: ``"echo: "`` + the last user message."""
    return "echo: " + _last_user(body)


class FakeOpenAIServer:
    """Threaded HTTP server speaking enough of the OpenAI chat API; a context manager.

    Attributes after start: ``base_url`` (``http://127.0.0.1:PORT/v1``), ``requests`` (bodies
    received, in order), ``headers`` (their lower-cased headers), ``count``, ``in_flight``, ``max_in_flight``.
    A request with ``top_logprobs`` gets them for its first token (the reply's first word, then made-up
    tokens) unless ``logprobs=False`` (a server without them).
    """

    def __init__(
        self,
        answer: str | Callable[[dict[str, Any]], str] = echo_answer,
        *,
        latency_s: float = 0.0,
        faults: Sequence[Fault] = (),
        model: str = "fake-model",
        owned_by: str = "fake",
        port: int = 0,
        logprobs: bool = True,
    ) -> None:
        self.answer = answer
        self.logprobs = logprobs
        self.owned_by = owned_by
        self.latency_s = latency_s
        self.faults = list(faults)
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.count = 0
        self.prompts: list[list[str]] = []  # the last 8 requests' prompt words, for the cached_tokens it reports
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = port

    @property
    def base_url(self) -> str:
        """The ``/v1`` URL clients use."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeOpenAIServer:
        """Bind ``port`` (0: an ephemeral one) on 127.0.0.1 and serve in a daemon thread."""
        handler = type("Handler", (_Handler,), {"server_state": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; sleeping handlers wake up and finish."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- used by the handler -------------------------------------------------------------------

    def _enter(self, body: dict[str, Any], headers: dict[str, str]) -> Fault | None:
        with self._lock:
            self.count += 1
            self.requests.append(body)
            self.headers.append(headers)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            prompt = _last_user(body)
            for fault in self.faults:
                if fault.claims(prompt):
                    return fault
        return None

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)

    def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
        text = self.answer if isinstance(self.answer, str) else self.answer(body)
        stops = body.get("stop") or []
        stops = [stops] if isinstance(stops, str) else stops
        cut = [i for i in (text.find(s) for s in stops if s) if i >= 0]
        finish = "stop"
        if cut:
            text = text[: min(cut)]
        words = text.split()
        limit = int(body.get("max_tokens") or 0)
        if limit and len(words) > limit:
            text, finish = " ".join(words[:limit]), "length"
        said = [w for m in body.get("messages", []) for w in str(m.get("content", "")).split()]
        prompt_tokens = len(said)
        with self._lock:  # a small prefix cache over words: the last 8 prompts
            recent, self.prompts = self.prompts, [*self.prompts[-7:], said]
        cached = max((len(os.path.commonprefix([said, seen])) for seen in recent), default=0)
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
        if self.logprobs and body.get("top_logprobs"):  # the first word at log 0.9, then made-up tokens below it
            top = [{"token": (text.split() or [""])[0], "logprob": -0.105}]
            top += [{"token": f"alt{i}", "logprob": -3.0 - i} for i in range(int(body["top_logprobs"]) - 1)]
            choice["logprobs"] = {"content": [{"token": top[0]["token"], "logprob": -0.105, "top_logprobs": top}]}
        return {
            "id": f"chatcmpl-{self.count}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": len(text.split()),
                "total_tokens": prompt_tokens + len(text.split()),
                "prompt_tokens_details": {"cached_tokens": min(cached, max(prompt_tokens - 1, 0))},
            },
        }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so clients can pool connections
    disable_nagle_algorithm = True  # headers and body go out in two writes
    server_state: FakeOpenAIServer

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging."""

    def do_GET(self) -> None:
        """``/v1/models`` lists the one model."""
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": self.server_state.model, "object": "model",
                                                        "owned_by": self.server_state.owned_by}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        """``/v1/chat/completions`` with latency and faults."""
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            self._send(400, {"error": {"message": "body is not JSON"}})
            return
        state = self.server_state
        fault = state._enter(body, {k.lower(): v for k, v in self.headers.items()})
        try:
            state._sleep(state.latency_s)
            if fault is not None and fault.kind == "timeout":
                state._sleep(fault.sleep_s)
            if fault is None or fault.kind == "timeout":
                self._send(200, state._completion(body))
            elif fault.kind in ("500", "429"):
                headers = {"Retry-After": "0"} if fault.kind == "429" else {}
                self._send(int(fault.kind), {"error": {"message": f"injected {fault.kind}"}}, headers)
            elif fault.kind == "garbage":
                self._send_raw(200, b"<html>502 Bad Gateway</html> {not json", "text/html")
            elif fault.kind == "null_choice":
                self._send(200, {"choices": [None]})
            elif fault.kind == "bad_gzip":
                self._send_raw(200, b"\x1f\x8b\x08 this is not gzip", "application/json", {"Content-Encoding": "gzip"})
            elif fault.kind == "echo_auth":
                self._send(401, {"error": {"message": f"bad key in {self.headers.get('Authorization')}"}})
            else:  # drop
                self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (timeout test)
        finally:
            state._leave()

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        self._send_raw(status, json.dumps(payload).encode(), "application/json", headers)

    def _send_raw(self, status: int, data: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


def _last_user(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            return str(message.get("content", ""))
    return ""


def main(argv: Sequence[str] | None = None) -> None:
    """Run a fake server in the foreground the way vLLM's OpenAI server is run (``python -m tandem.testing.
    fake_server ... --port P --served-model-name NAME``; vLLM's other arguments are ignored), for tests
    of process handling: ``--latency S`` per reply; ``--pid-file F`` gets "SERVER_PID WORKER_PID" once
    it serves, the worker being a child process (vLLM forks workers). SIGTERM stops both and exits 0."""
    import argparse
    import os
    import signal
    import subprocess
    import sys

    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--served-model-name", default="fake-model")
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--pid-file")
    args, _ = parser.parse_known_args(argv)
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with FakeOpenAIServer(model=args.served_model_name, port=args.port, latency_s=args.latency) as server:
        if args.pid_file:
            with open(args.pid_file, "w", encoding="utf-8") as handle:
                handle.write(f"{os.getpid()} {worker.pid}\n")
        print(f"serving {server.base_url}", flush=True)
        stopped.wait()
    worker.terminate()
    worker.wait()


if __name__ == "__main__":
    main()
