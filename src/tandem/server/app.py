"""The HTTP API and web page (FastAPI): ``create_app(engine, ...)``; ``tandem serve`` runs it with uvicorn.

Routes (OpenAPI at ``/docs``): ``GET /healthz``, ``GET /v1/methods``, ``GET /v1/indexes``,
``POST /v1/retrieve``, ``POST /v1/ask``, ``POST /v1/ask/stream`` (Server-Sent Events: one ``step``
event per trace step as it completes, then ``answer``), ``POST /v1/chat/completions`` (OpenAI
compatible; ``model`` names a method; the trace in the extra field ``tandem``), and the page at ``/``.

Security: with an API key every ``/v1`` route needs ``Authorization: Bearer KEY`` (compared in
constant time; 401 otherwise); request bodies over ``max_body`` bytes get 413, questions over
``max_question`` characters 422; a full work queue 429 with ``Retry-After``; CORS only for the
origins given; no route takes a file path from a request.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field

from tandem import __version__
from tandem.errors import Cancelled, ConfigError, DataError, IndexMismatchError, LLMError, TandemError
from tandem.io import SURROGATE, lone_surrogate
from tandem.methods import METHODS, method_settings
from tandem.secrets import redact, register_secret
from tandem.server.engine import Busy, Engine

STATIC = Path(__file__).parent / "static"
# error class -> HTTP status (the one map; anything else is a 500 with a redacted message)
STATUS: dict[type[Exception], int] = {Busy: 429, ConfigError: 422, DataError: 422, IndexMismatchError: 422,
                                      LLMError: 502, Cancelled: 499, TandemError: 400}


class AskRequest(BaseModel):
    question: str = Field(min_length=1, description="The question.")
    method: str | None = Field(None, description="A method name (GET /v1/methods); default: the server's.")
    index: str | None = Field(None, description="An index name (GET /v1/indexes); default: the first.")
    settings: dict[str, Any] = Field(default_factory=dict, description="Method settings, e.g. {\"max_iter\": 3}.")


class RetrieveRequest(BaseModel):
    query: str = Field(min_length=1)
    index: str | None = None
    k: int = Field(5, ge=1, le=100)
    retriever: Literal["bm25", "dense", "hybrid", "graph"] | None = None


class UploadRequest(BaseModel):
    name: str = Field(description="The new index's name (letters, digits, '-', '_').")
    kind: Literal["bm25", "dense", "hybrid"] = "bm25"
    files: dict[str, str] = Field(description="File name (.txt, .md, .jsonl) -> its text.")


class ChatMessage(BaseModel):
    role: str
    content: str


class ChatRequest(BaseModel):
    model: str = Field(description="A tandem method name, e.g. dualrag.")
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    index: str | None = Field(None, description="tandem extension: the index to search.")
    settings: dict[str, Any] = Field(default_factory=dict, description="tandem extension: method settings.")


class BodyLimit:
    """ASGI middleware: a request body over its limit gets 413, whether it declares a length or comes
    chunked (the body is read up to the limit, then handed on); a JSON body holding a lone surrogate
    escape (``"\\ud800"``: valid JSON, but no character) or NaN / Infinity gets 400 (neither its
    answer nor its validation error could be written as JSON)."""

    def __init__(self, app: Any, max_body: int, max_upload: int) -> None:
        self.app, self.max_body, self.max_upload = app, max_body, max_upload

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        limit = self.max_upload if scope["path"] == "/v1/indexes" else self.max_body
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                response = _error(413, f"request body over the limit of {limit} bytes", "too_large")
                await response(scope, receive, send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if (reason := _unanswerable(body)) is not None:
            await _error(400, f"request body holds {reason}", "bad_request")(scope, receive, send)
            return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def create_app(engine: Engine, *, api_key: str | None = None, max_body: int = 1 << 20, max_question: int = 2000,
               max_upload: int = 20 << 20, cors: list[str] | None = None) -> FastAPI:
    """The FastAPI app over ``engine``."""
    app = FastAPI(title="tandem", version=__version__, description=__doc__)
    app.state.engine = engine
    register_secret(api_key)

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Any:
        if request.url.path.startswith("/v1/") and api_key is not None and request.method != "OPTIONS":
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                return JSONResponse({"error": {"message": "missing or wrong API key (Authorization: Bearer KEY)",
                                               "type": "unauthorized"}}, status_code=401,
                                    headers={"WWW-Authenticate": "Bearer"})
        return await call_next(request)

    app.add_middleware(BodyLimit, max_body=max_body, max_upload=max_upload)
    if cors:  # added last, so outermost: preflight requests are answered before the key is asked for
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=cors, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])

    @app.exception_handler(TandemError)
    async def tandem_error(request: Request, exc: TandemError) -> JSONResponse:
        return _error_for(exc)

    def check_question(text: str) -> None:
        if len(text) > max_question:
            raise ConfigError(f"the question has {len(text)} characters; the limit is {max_question}")

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "version": __version__}

    @app.get("/v1/methods")
    async def methods() -> dict[str, Any]:
        return {"default": engine.default_method,
                "methods": [{"name": n, "settings": method_settings(n)} for n in sorted(METHODS)]}

    @app.get("/v1/indexes")
    async def indexes() -> dict[str, Any]:
        return {"default": engine.default_index,
                "indexes": [{"name": n, "kind": i.kind, "documents": i.manifest.doc_count, "encoder": i.manifest.encoder}
                            for n, i in engine.indexes.items()]}

    @app.post("/v1/indexes", status_code=202)
    async def upload(req: UploadRequest) -> dict[str, Any]:
        """Build an index from uploaded files in the background; poll GET /v1/jobs/{id}."""
        return engine.start_index_job(req.name, req.files, req.kind)

    @app.get("/v1/jobs/{job_id}")
    async def job(job_id: str) -> dict[str, Any]:
        if job_id not in engine.jobs:
            raise ConfigError(f"no job {job_id!r}")
        return dict(engine.jobs[job_id])

    @app.post("/v1/retrieve")
    async def retrieve(req: RetrieveRequest) -> dict[str, Any]:
        check_question(req.query)
        hits = await asyncio.wrap_future(engine.submit(engine.retrieve, req.query, req.index, req.k, req.retriever))
        return {"query": req.query, "hits": hits}

    @app.post("/v1/ask")
    async def ask(req: AskRequest) -> dict[str, Any]:
        check_question(req.question)
        return await asyncio.wrap_future(engine.submit(engine.ask, req.question, req.method, req.index, req.settings))

    @app.post("/v1/ask/stream")
    async def ask_stream(req: AskRequest) -> StreamingResponse:
        check_question(req.question)
        await asyncio.to_thread(engine.method, req.method, req.index, req.settings)  # bad settings: 422, not a 200 stream
        events = _run_streaming(engine, req.question, req.method, req.index, req.settings)
        first = await anext(events)  # a full queue (429) is raised before the stream starts
        return StreamingResponse(_sse(first, events), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest) -> Any:
        question = next((m.content for m in reversed(req.messages) if m.role == "user"), "")
        if not question.strip():
            raise ConfigError("no user message with content in 'messages'")
        check_question(question)
        if req.model not in METHODS:
            raise ConfigError(f"unknown model {req.model!r}: a tandem method name, one of {sorted(METHODS)}")
        cid, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
        if not req.stream:
            result = await asyncio.wrap_future(engine.submit(engine.ask, question, req.model, req.index, req.settings))
            return {"id": cid, "object": "chat.completion", "created": created, "model": req.model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": result["answer"]},
                                 "finish_reason": "stop"}],
                    "usage": _usage(result), "tandem": result}
        await asyncio.to_thread(engine.method, req.model, req.index, req.settings)
        events = _run_streaming(engine, question, req.model, req.index, req.settings)
        first = await anext(events)
        return StreamingResponse(_chat_chunks(first, events, cid, created, req.model), media_type="text/event-stream")

    app.mount("/", StaticFiles(directory=STATIC, html=True), name="page")
    return app


async def _run_streaming(engine: Engine, question: str, method: str | None, index: str | None,
                         settings: dict[str, Any]) -> AsyncIterator[tuple[str, Any]]:
    """Events of one streamed ask: ``("started", None)`` once admitted, ``("step", {...})`` per step as it
    completes, then ``("answer", payload)`` or ``("error", {...})``. Closing the iterator (the client went
    away) cancels the work at its next step or LLM call."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    sent: list[int] = []
    cancelled = threading.Event()

    def on_step(step: dict[str, Any]) -> None:
        sent.append(step["index"])
        loop.call_soon_threadsafe(queue.put_nowait, ("step", step))

    future = engine.submit(engine.ask, question, method, index, settings, on_step, cancelled)
    future.add_done_callback(lambda f: loop.call_soon_threadsafe(queue.put_nowait, ("done", None)))
    try:
        yield ("started", None)
        while True:
            kind, data = await queue.get()
            if kind == "step":
                yield kind, data
                continue
            exc = future.exception()
            if exc is not None:
                status = _status(exc)
                yield "error", {"status": status, "message": redact(str(exc)), "type": type(exc).__name__}
                return
            result = future.result()
            last = len(result["trace"]["steps"])
            for i in range((sent[-1] + 1) if sent else 0, last):  # the steps not streamed yet (the last one)
                yield "step", result["trace"]["steps"][i]
            yield "answer", result
            return
    finally:
        cancelled.set()


async def _sse(first: tuple[str, Any], events: AsyncIterator[tuple[str, Any]]) -> AsyncIterator[str]:
    yield ": started\n\n"
    try:
        async for kind, data in events:
            yield f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
    finally:
        await events.aclose()


async def _chat_chunks(first: tuple[str, Any], events: AsyncIterator[tuple[str, Any]], cid: str, created: int,
                       model: str) -> AsyncIterator[str]:
    """OpenAI ``chat.completion.chunk`` events: a role chunk, one chunk per trace step (empty delta, the
    step in ``tandem_step``), the answer as content, a final chunk with the whole result in ``tandem``,
    then ``[DONE]``."""

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        body = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    yield chunk({"role": "assistant"})
    try:
        async for kind, data in events:
            if kind == "step":
                yield chunk({}, tandem_step=data)
            elif kind == "answer":
                yield chunk({"content": data["answer"]})
                yield chunk({}, "stop", usage=_usage(data), tandem=data)
            else:
                yield f"data: {json.dumps({'error': data})}\n\n"
        yield "data: [DONE]\n\n"
    finally:
        await events.aclose()


def _usage(result: dict[str, Any]) -> dict[str, int]:
    cost = result["cost"]
    return {"prompt_tokens": cost["prompt_tokens"], "completion_tokens": cost["completion_tokens"],
            "total_tokens": cost["prompt_tokens"] + cost["completion_tokens"]}


def _status(exc: BaseException) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


class _Constant(Exception):
    """``NaN``, ``Infinity`` or ``-Infinity`` in a body (Python's JSON reads them; JSON has no such numbers)."""


def _unanswerable(body: bytes) -> str | None:
    """Why a JSON body that parses could not be answered, not even with its validation error: a lone
    surrogate escape, or NaN / Infinity (no JSON reply can hold either); None for any other body."""
    lowered = body.lower()
    if b"\\ud" not in lowered and b"nan" not in lowered and b"infinity" not in lowered:
        return None

    def constant(name: str) -> Any:
        raise _Constant(name)

    try:
        text = body.decode("utf-8")
        obj = json.loads(text, parse_constant=constant)
    except _Constant as exc:
        return f"{exc}, which is not a JSON number"
    except (ValueError, RecursionError):
        return None  # not JSON: FastAPI's own parse error answers it
    return SURROGATE if lone_surrogate(text, obj) else None


def _error(status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": redact(message), "type": kind}}, status_code=status, headers=headers)


def _error_for(exc: BaseException) -> JSONResponse:
    status = _status(exc)
    return _error(status, str(exc), type(exc).__name__, {"Retry-After": "2"} if status == 429 else None)
