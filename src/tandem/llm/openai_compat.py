"""OpenAI-compatible chat-completions backend (vLLM, Ollama, llama.cpp server, SGLang, hosted APIs).

One pooled ``httpx.Client`` per instance, timeouts, retries with exponential backoff and jitter, and
a semaphore bounding the number of requests in flight. Safe to call from many threads.

Fault budget (each a constructor option, so ``--llm-opt``): a refused connection is retried
``connect_retries`` times (default 1: a dead server fails in about a second, not minutes), a timeout
``timeout_retries`` times (default 1), and 429 / 5xx / unreadable or malformed replies ``max_retries``
times; every retry is logged. An :class:`LLMError` says which ``kind`` of failure ended the call
(``connect``, ``timeout``, ``http``, ``reply``), so a run can stop after consecutive dead-server errors.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import threading
import time
from dataclasses import replace
from typing import Any

import httpx

from tandem.errors import ConfigError, LLMError
from tandem.llm.base import (
    LLMRequest,
    LLMResponse,
    truncate_at_stop,
    with_json_instruction,
)
from tandem.secrets import redact, register_secret

JSON_MODES = ("auto", "prompt", "schema", "object")
# GET /v1/models "owned_by" -> the structured output the server has (json_mode="auto")
SERVER_JSON_MODES = {"vllm": "schema", "sglang": "schema", "openai": "schema", "system": "schema",
                     "llamacpp": "schema", "ollama": "object", "library": "object"}
RETRY_STATUS = frozenset({408, 409, 425, 429})
DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_CONTEXT_WINDOW = 32768


log = logging.getLogger("tandem.llm")


def _cached_tokens(usage: dict[str, Any]) -> int:
    """Prompt tokens a server says came from its prefix cache (``usage.prompt_tokens_details.cached_tokens``:
    OpenAI; vLLM started with ``--enable-prompt-tokens-details``); 0 where it says nothing usable."""
    details = usage.get("prompt_tokens_details")
    try:
        return max(int(details.get("cached_tokens") or 0), 0) if isinstance(details, dict) else 0
    except (TypeError, ValueError):
        return 0


class _RetryableError(Exception):
    """Internal: one attempt failed in a way worth retrying; ``kind`` picks the retry budget."""

    def __init__(self, message: str, kind: str = "http", retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.retry_after = retry_after


class OpenAILLM:
    """Client of ``POST {base_url}/chat/completions``.

    Args:
        model: model name the server knows.
        base_url: e.g. ``http://127.0.0.1:8000/v1`` (vLLM), ``http://127.0.0.1:11434/v1`` (Ollama).
        api_key: the key itself; default: read from the environment variable ``api_key_env``.
            Local servers need none (a placeholder is sent).
        timeout: seconds for the whole response (read/write/pool); ``connect_timeout`` for connecting.
        max_retries: retries of 429 / 5xx / unreadable replies after the first attempt.
        connect_retries: retries of a refused or failed connection (default 1).
        timeout_retries: retries of a timed-out request (default 1).
        backoff_base / backoff_max: sleep ``min(backoff_max, backoff_base * 2**n)`` plus up to 50 %
            random jitter before retry ``n``; a 429's ``Retry-After`` is honoured up to ``backoff_max``.
        max_concurrency: requests in flight at once from this instance (others wait).
        json_mode: how ``LLMRequest.json_schema`` is passed on: ``"auto"`` (default: chosen from the
            server's ``GET /models`` ``owned_by``, see :data:`SERVER_JSON_MODES`; ``prompt`` for a server
            it does not know), ``"prompt"`` (instruction in the prompt, works everywhere), ``"schema"``
            (``response_format={"type": "json_schema"}``: vLLM, SGLang, OpenAI, llama.cpp server; the
            reply is decoded under the schema), ``"object"`` (``{"type": "json_object"}`` plus the
            instruction: Ollama).
        extra_body: merged into every request body (e.g. ``{"top_p": 1.0}``).
        context_window: the model's context in tokens, for cutting over-long prompts; default: the
            server's ``max_model_len`` (vLLM says it in ``GET /models``), else 32,768.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        max_retries: int = 3,
        connect_retries: int = 1,
        timeout_retries: int = 1,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        max_concurrency: int = 8,
        json_mode: str = "auto",
        extra_body: dict[str, Any] | None = None,
        context_window: int | None = None,
        spec: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not model:
            raise ConfigError("openai backend needs a model name: openai:MODEL@BASE_URL")
        if json_mode not in JSON_MODES:
            raise ConfigError(f"unknown json_mode {json_mode!r}; modes: {sorted(JSON_MODES)}")
        if max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be >= 1, got {max_concurrency}")
        for name, value in (("max_retries", max_retries), ("connect_retries", connect_retries),
                            ("timeout_retries", timeout_retries)):
            if not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be an integer >= 0, got {value!r}")
        for name, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
            if not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        self.name = model
        self.base_url = check_base_url(base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL)
        self.spec = redact(spec or f"openai:{model}@{self.base_url}")
        # 429 / 5xx / dropped exchanges and unreadable replies share one budget
        self.retries = {"http": max_retries, "connect": connect_retries, "timeout": timeout_retries}
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.max_concurrency = max_concurrency
        self._json_mode = json_mode
        self.detected_owner: str | None = None
        self._context_window = context_window
        self.extra_body = dict(extra_body or {})
        key = api_key if api_key is not None else os.environ.get(api_key_env, "")
        register_secret(key)
        headers = {"Authorization": f"Bearer {key or 'EMPTY'}", "Content-Type": "application/json"}
        self._client = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency),
            transport=transport,
        )
        self._slots = threading.BoundedSemaphore(max_concurrency)

    # -- public -----------------------------------------------------------------------------

    @property
    def json_mode(self) -> str:
        """The JSON mode in force; ``auto`` is resolved on first use from ``GET /models``."""
        if self._json_mode == "auto":
            self._json_mode = self._detect_json_mode()
        return self._json_mode

    @property
    def context_window(self) -> int:
        """The model's context in tokens: the option, else the server's ``max_model_len``, else 32,768."""
        if self._context_window is None:
            try:
                resp = self._client.get("/models", timeout=10.0)
            except httpx.HTTPError:
                return DEFAULT_CONTEXT_WINDOW  # not reachable now: asked again next time
            self._context_window = DEFAULT_CONTEXT_WINDOW
            with contextlib.suppress(ValueError, AttributeError, TypeError):
                entries = resp.json().get("data") or []
                mine = [e for e in entries if isinstance(e, dict) and e.get("id") == self.name]
                if mine and isinstance(mine[0].get("max_model_len"), int):
                    self._context_window = mine[0]["max_model_len"]
        return self._context_window

    #: a server answers concurrent requests at once (vLLM batches them; :func:`tandem.llm.base.batches`)
    batches = True
    #: ``first_tokens`` requests ask for ``top_logprobs`` (a server without them: LLMError on the reply)
    tells_first_tokens = True

    @property
    def constrains_json(self) -> bool:
        """True when schema requests are decoded under the schema by the server (``json_mode="schema"``)."""
        return self.json_mode == "schema"

    def _detect_json_mode(self) -> str:
        """``owned_by`` of this model (or the first one) in ``GET /models`` -> a JSON mode; ``prompt``
        when the server does not say or cannot be asked (a dead server fails later with its own error)."""
        try:
            resp = self._client.get("/models", timeout=10.0)
            entries = resp.json().get("data") or [] if resp.status_code == 200 else []
        except (httpx.HTTPError, json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            return "prompt"
        entries = [e for e in entries if isinstance(e, dict)]
        mine = [e for e in entries if e.get("id") == self.name] or entries
        owner = str(mine[0].get("owned_by", "")).lower() if mine else ""
        self.detected_owner = owner or None
        return SERVER_JSON_MODES.get(owner, "prompt")

    def complete(self, req: LLMRequest) -> LLMResponse:
        """Send ``req``; retry transient failures; raise :class:`LLMError` when retries run out."""
        return self._send(self.request_body(req), req,
                          constrained=req.json_schema is not None and self.json_mode == "schema")

    def request_body(self, req: LLMRequest) -> dict[str, Any]:
        """The JSON body sent for ``req`` (exposed for tests and debugging)."""
        mode = self.json_mode if req.json_schema is not None else "prompt"  # no schema: nothing to resolve
        messages = req.messages if mode == "schema" else with_json_instruction(req)
        body: dict[str, Any] = {
            "model": self.name,
            "messages": [m.to_dict() for m in messages],
            "max_tokens": req.max_tokens,
            "temperature": req.temperature,
        }
        if req.stop:
            body["stop"] = list(req.stop)
        if req.seed is not None:
            body["seed"] = req.seed
        if req.first_tokens:  # the OpenAI API's top_logprobs (vLLM and llama.cpp's server speak it too)
            body.update(max_tokens=1, logprobs=True, top_logprobs=req.first_tokens)
        if req.json_schema is not None and mode == "schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": str(req.json_schema.get("title", "answer")), "schema": req.json_schema,
                                "strict": True},
            }
        elif req.json_schema is not None and mode == "object":
            body["response_format"] = {"type": "json_object"}
        body.update(self.extra_body)
        return body

    def complete_prompt_embeds(self, prompt_embeds: Any, req: LLMRequest) -> LLMResponse:
        """Generate from prompt embeddings (a ``(n, hidden)`` torch tensor) through ``POST /completions``.

        vLLM takes them as ``prompt_embeds``: base64 of a ``torch.save``d tensor, when the server runs with
        ``--enable-prompt-embeds`` (docs.vllm.ai, "Prompt Embedding Inputs"); the completions endpoint
        applies no chat template, so the embeddings must cover the whole templated prompt. ``req``
        supplies max_tokens / temperature / stop / seed; its messages are not sent.
        """
        body: dict[str, Any] = {"model": self.name, "prompt_embeds": encode_prompt_embeds(prompt_embeds),
                                "max_tokens": req.max_tokens, "temperature": req.temperature}
        if req.stop:
            body["stop"] = list(req.stop)
        if req.seed is not None:
            body["seed"] = req.seed
        body.update(self.extra_body)
        return self._send(body, req, "/completions", "prompt-embeds request")

    def _send(self, body: dict[str, Any], req: LLMRequest, path: str = "/chat/completions",
              what: str = "request", constrained: bool = False) -> LLMResponse:
        """POST ``body`` to ``path`` within the concurrency bound; retry
        transient failures with backoff; raise :class:`LLMError` when retries run out."""
        start = time.perf_counter()
        tries: dict[str, int] = {}
        attempt = 0
        while True:
            try:
                with self._slots:
                    data = self._post(body, path)
                    response = self._to_response(data, req, time.perf_counter() - start)
                return replace(response, constrained=constrained)
            except _RetryableError as exc:
                budget = "http" if exc.kind == "reply" else exc.kind
                tries[budget] = tries.get(budget, 0) + 1
                attempt += 1
                if tries[budget] > self.retries[budget]:
                    raise LLMError(redact(f"{self.spec}: {what} failed after {attempt} attempt(s); last error: {exc}"),
                                   kind=exc.kind) from None
                delay = self._backoff(attempt - 1, exc.retry_after)
                log.warning("%s", redact(f"{self.spec}: {exc}; retry {tries[budget]} of {self.retries[budget]} "
                                         f"in {delay:.1f}s"))
                time.sleep(delay)

    def close(self) -> None:
        """Close the pooled connections."""
        self._client.close()

    def __enter__(self) -> OpenAILLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"OpenAILLM(model={self.name!r}, base_url={self.base_url!r})"

    # -- internals --------------------------------------------------------------------------

    def _post(self, body: dict[str, Any], path: str = "/chat/completions") -> dict[str, Any]:
        try:
            resp = self._client.post(path, json=body)
        except httpx.TimeoutException as exc:
            raise _RetryableError(f"timeout ({type(exc).__name__})", "timeout") from exc
        except (httpx.ConnectError, httpx.UnsupportedProtocol) as exc:
            raise _RetryableError(f"cannot connect ({type(exc).__name__}: {exc})", "connect") from exc
        except httpx.DecodingError as exc:
            raise _RetryableError(f"unreadable body ({type(exc).__name__}: {exc})", "reply") from exc
        except httpx.HTTPError as exc:  # connected, then the exchange broke (dropped, reset, protocol error)
            raise _RetryableError(f"connection error ({type(exc).__name__}: {exc})", "http") from exc
        if resp.status_code in RETRY_STATUS or resp.status_code >= 500:
            raise _RetryableError(f"HTTP {resp.status_code}: {resp.text[:200]!r}", "http", _retry_after(resp))
        if resp.status_code >= 400:
            hint = (" (prompt embeddings need a vLLM server started with --enable-prompt-embeds)"
                    if "prompt_embeds" in body else "")
            raise LLMError(redact(f"{self.spec}: HTTP {resp.status_code} (not retried){hint}: {resp.text[:500]}"),
                           kind="http")
        try:
            data = resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _RetryableError(f"unreadable body (not JSON): {resp.text[:200]!r}", "reply") from exc
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
            raise _RetryableError(f"body without choices: {str(data)[:200]!r}", "reply")
        return data

    def _to_response(self, data: dict[str, Any], req: LLMRequest, latency: float) -> LLMResponse:
        choice = data["choices"][0]
        if not isinstance(choice, dict):
            raise _RetryableError(f"malformed reply: choices[0] is {type(choice).__name__}, not an object", "reply")
        message = choice.get("message") or {}
        text = message.get("content") if isinstance(message, dict) else None
        if text is None:
            text = choice.get("text") or ""
        text, hit_stop = truncate_at_stop(str(text), req.stop)
        reason = str(choice.get("finish_reason") or "stop")
        if hit_stop:
            reason = "stop"
        usage = data.get("usage") or {}
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        first = _first_tokens(choice, self.spec) if req.first_tokens else ()
        return LLMResponse(
            first_tokens=first,
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=int(usage.get("completion_tokens") or 0),
            reused_tokens=min(_cached_tokens(usage), prompt_tokens),
            latency_s=latency,
            finish_reason=reason,
            model=str(data.get("model") or self.name),
        )

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self.backoff_max, self.backoff_base * (2**attempt))
        delay *= 1.0 + 0.5 * random.random()
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_max))
        return delay


def _first_tokens(choice: dict[str, Any], spec: str) -> tuple[tuple[str, float], ...]:
    """The top log-probabilities of a reply's first token (``choices[0].logprobs.content[0].top_logprobs``)."""
    try:
        top = choice["logprobs"]["content"][0]["top_logprobs"]
        return tuple((str(t["token"]), float(t["logprob"])) for t in top)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise LLMError(f"{spec}: the reply has no top_logprobs ({type(exc).__name__}): this server cannot tell "
                       "its first tokens' probabilities", kind="reply") from exc


def check_base_url(url: str) -> str:
    """The base URL without a trailing slash, or a ConfigError naming what is wrong with it (credentials
    in the URL are not repeated in the message)."""
    try:
        parsed = httpx.URL(url.rstrip("/"))
        port = parsed.port
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise ConfigError(redact(f"invalid LLM base URL {url!r}: {exc}")) from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(redact(f"invalid LLM base URL {url!r}: it needs http:// or https:// and a host"))
    if port is not None and not 0 < port < 65536:
        raise ConfigError(redact(f"invalid LLM base URL {url!r}: port {port} is out of range"))
    return str(parsed)


def encode_prompt_embeds(tensor: Any) -> str:
    """vLLM's wire format for prompt embeddings: base64 of ``torch.save(tensor)`` (a 2-D float tensor)."""
    import base64
    import io

    import torch

    if not isinstance(tensor, torch.Tensor) or tensor.dim() != 2:
        raise ConfigError(f"prompt embeddings must be a 2-D torch tensor (n, hidden), got {getattr(tensor, 'shape', tensor)!r}")
    buf = io.BytesIO()
    torch.save(tensor.detach().cpu().contiguous(), buf)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
