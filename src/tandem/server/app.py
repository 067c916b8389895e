"""The HTTP API and web page (FastAPI): ``create_app(engine, ...)``; ``tandem serve`` runs it with uvicorn.

Routes (OpenAPI at ``/docs``, every request and response typed: :mod:`tandem.server.models`): ``GET /healthz``,
``GET /v1/methods``, ``GET /v1/models`` (the methods in OpenAI's shape), ``GET /v1/indexes``,
``POST /v1/retrieve``, ``POST /v1/ask``, ``POST /v1/ask/stream`` (Server-Sent Events: one ``step``
event per trace step as it completes, then ``answer``), ``POST /v1/chat/completions`` (OpenAI
compatible; ``model`` names a method; the trace in the extra field ``tandem``), and the page at ``/``.

Security: with an API key every ``/v1`` route needs ``Authorization: Bearer KEY`` (compared in
constant time; 401 otherwise); request bodies over ``max_body`` bytes get 413, questions over
``max_question`` characters 422; an unknown index, job or model 404; a body that is not JSON 400; a full
work queue 429 with ``Retry-After``; a method a route does not take 405 with ``Allow``; CORS only for the
origins given; no route takes a file path from a request, nor a setting that loads a model or file.
"""

from __future__ import annotations

import asyncio
import hmac
import time
import typing
import uuid
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Body, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from pydantic import ConfigDict, Field, create_model
from starlette.exceptions import HTTPException as StarletteHTTPException

from tandem.errors import (
    ConfigError,
    NotFound,
    TandemError,
)
from tandem.io import check_text
from tandem.registry import METHODS
from tandem.secrets import register_secret
from tandem.server import models as M
from tandem.server.engine import Engine
from tandem.server.middleware import BodyLimit, StopReply, error_response
from tandem.server.streaming import chat_chunks, run_streaming, sse, status_of, usage
from tandem.settings import per_request
from tandem.version import __version__

STATIC = Path(__file__).parent / "static"
# error class -> HTTP status (the one map; anything else is a 500 with a redacted message)

class RetrieveRequest(M.Strict):
    query: str = Field(min_length=1, pattern=M.TEXT_PATTERN, description="The search query.")
    index: str | None = Field(None, pattern=M.NAME_PATTERN, description="An index name; default: the first.")
    k: int = Field(5, ge=1, le=100, description="Hits to return.")


class UploadRequest(M.Strict):
    name: str = Field(pattern=M.NAME_PATTERN, description="The new index's name (letters, digits, '-', '_').")
    kind: Literal["bm25", "dense", "hybrid"] = "bm25"
    files: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_. -]{0,127}\.(txt|md|markdown|jsonl)$")],
                str] = Field(min_length=1, description="File name (.txt, .md, .jsonl) -> its text.",
                             json_schema_extra={"additionalProperties": False})


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
    _allow_header_on_405(app, {} if engine.uploads is not None else {
        ("POST", "/v1/indexes"): "this server takes no uploads (start it with --uploads DIR)"})
    app.add_middleware(StopReply)  # outside the others: it sees the cancellation at the end of the grace
    if cors:  # added last, so outermost: preflight requests are answered before the key is asked for
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=cors, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])

    @app.exception_handler(TandemError)
    async def tandem_error(request: Request, exc: TandemError) -> JSONResponse:
        return _error_for(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "BadRequest" if exc.status_code == 400 else "NotFound" if exc.status_code == 404 else "HTTPError"
        message = "the request body is not valid JSON" if exc.status_code == 400 else str(exc.detail)
        return error_response(exc.status_code, message, kind, dict(exc.headers or {}) or None)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = exc.errors()
        if any(e.get("type") == "json_invalid" for e in problems):
            return error_response(400, "the request body is not valid JSON", "BadRequest")
        lines = [_problem(e, app.state.default_method) for e in problems[:10]]
        return error_response(422, "; ".join(lines), "ValidationError")

    servable = engine.servable_methods()
    default = app.state.default_method = engine.default_method if engine.default_method in servable else servable[0]
    AskBody = M.ask_request_model([METHODS.get(n) for n in servable], default, max_question)  # noqa: N806
    ChatBody = _chat_request_model(servable)  # noqa: N806
    errors = M.error_responses

    @app.get("/healthz", response_model=M.Health)
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "version": __version__}

    @app.get("/v1/methods", response_model=M.MethodsResponse, responses=errors(401))
    async def methods() -> dict[str, Any]:
        """Every registered method with its settings' defaults (``tandem methods NAME`` describes them)."""
        return {"default": engine.default_method,
                "methods": [{"name": e.name, "doc": e.doc, "needs": list(e.needs), "served": e.name in servable,
                             "settings": e.defaults()} for e in METHODS.entries()]}

    @app.get("/v1/models", response_model=M.ModelList, responses=errors(401))
    async def models() -> dict[str, Any]:
        """The methods this server answers with, in OpenAI's shape: ``model`` of a chat completion names one."""
        return {"object": "list", "data": [{"id": n, "object": "model", "created": STARTED, "owned_by": "tandem"}
                                           for n in servable]}

    @app.get("/v1/indexes", response_model=M.IndexesResponse, responses=errors(401))
    async def indexes() -> dict[str, Any]:
        return {"default": engine.default_index,
                "indexes": [{"name": n, "kind": i.kind, "documents": i.manifest.doc_count, "encoder": i.manifest.encoder}
                            for n, i in engine.indexes.items()]}

    if engine.uploads is not None:
        @app.post("/v1/indexes", status_code=202, response_model=M.Job, responses=errors(400, 401, 409, 413, 422, 429))
        async def upload(req: UploadRequest) -> dict[str, Any]:
            """Build an index from uploaded files in the background; poll GET /v1/jobs/{id}."""
            return engine.start_index_job(req.name, req.files, req.kind)

        @app.get("/v1/jobs/{job_id}", response_model=M.Job, responses=errors(401, 404))
        async def job(job_id: str) -> dict[str, Any]:
            if job_id not in engine.jobs:
                raise NotFound(f"no job {job_id!r}")
            return dict(engine.jobs[job_id])

    retrievers = engine.servable_retrievers()
    Retrieve = create_model("RetrieveBody", __base__=RetrieveRequest,  # noqa: N806
                            retriever=((Literal[tuple(retrievers)] if retrievers else None) | None,  # type: ignore[valid-type]
                                       Field(None, description="A retriever some index here can serve; "
                                                               "default: the index's own kind.")))

    @app.post("/v1/retrieve", response_model=M.RetrieveResponse, response_model_exclude_none=True,
              responses=errors(400, 401, 404, 413, 422, 429))
    @_body(Retrieve)
    async def retrieve(req: Any) -> dict[str, Any]:
        hits = await asyncio.wrap_future(engine.submit(engine.retrieve, req.query, req.index, req.k, req.retriever,
                                                         lane="searches"))
        return {"query": req.query, "hits": hits}

    @app.post("/v1/ask", response_model=M.AskResponse, responses=errors(400, 401, 404, 413, 422, 429, 502))
    @_body(AskBody)
    async def ask(req: Any) -> dict[str, Any]:
        method, settings = _method_and_settings(req)
        return await asyncio.wrap_future(engine.submit(engine.ask, req.question, method, req.index, settings))

    @app.post("/v1/ask/stream", response_class=StreamingResponse,
              responses={200: {"content": M.SSE, "description": "Server-Sent Events: `step` per trace step as it "
                                                                "completes, then `answer` (or `error`)."},
                         **errors(400, 401, 404, 413, 422, 429)})
    @_body(AskBody)
    async def ask_stream(req: Any) -> StreamingResponse:
        method, settings = _method_and_settings(req)
        await asyncio.to_thread(engine.method, method, req.index, settings)  # bad settings: 422, not a 200 stream
        events = run_streaming(engine, req.question, method, req.index, settings)
        first = await anext(events)  # a full queue (429) is raised before the stream starts
        return StreamingResponse(sse(first, events), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.post("/v1/chat/completions", response_model=M.ChatCompletion,
              responses={200: {"content": M.SSE, "description": "A chat.completion, or with `stream` its chunks as "
                                                                "Server-Sent Events."},
                         **errors(400, 401, 404, 413, 422, 429, 502)})
    @_body(ChatBody)
    async def chat(req: Any) -> Any:
        question = _chat_question(req.messages)
        check_text("question", question, max_question)
        settings = req.settings.model_dump(exclude_unset=True)
        cid, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
        if not req.stream:
            result = await asyncio.wrap_future(engine.submit(engine.ask, question, req.model, req.index, settings))
            return {"id": cid, "object": "chat.completion", "created": created, "model": req.model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": result["answer"]},
                                 "finish_reason": "stop"}],
                    "usage": usage(result), "tandem": result}
        await asyncio.to_thread(engine.method, req.model, req.index, settings)
        events = run_streaming(engine, question, req.model, req.index, settings)
        first = await anext(events)
        return StreamingResponse(chat_chunks(first, events, cid, created, req.model), media_type="text/event-stream")

    app.mount("/", StaticFiles(directory=STATIC, html=True), name="page")
    return app


STARTED = int(time.time())


def _field_path(loc: Any) -> list[Any]:
    """A validation error's location in the body: without ``body`` and the union's tag (``_default``, a method)."""
    path = list(loc)[1:]
    return path[1:] if path and isinstance(path[0], str) and (path[0] == "_default" or path[0] in METHODS) else path


def _problem(error: Any, default: str) -> str:
    """One line for a body validation error; a setting a request may not send says why, an unknown one lists
    the settings the method takes per request."""
    loc = list(error.get("loc", ()))
    if error.get("type") == "union_tag_invalid":  # the body's "method" names no method this server answers with
        served = [t.strip(" '") for t in str(error.get("ctx", {}).get("expected_tags", "")).split(",")]
        return (f"unknown method {error.get('ctx', {}).get('tag')!r}; choose one of "
                f"{sorted(t for t in served if t != '_default')}")
    path = _field_path(loc)
    if error.get("type") == "extra_forbidden" and len(path) == 2 and path[0] == "settings":
        method = loc[1] if len(loc) > 1 and loc[1] in METHODS else default
        fields = METHODS.get(method).settings.model_fields
        if path[1] in fields and not per_request(fields[path[1]]):
            return (f"setting {path[1]!r} loads a model or file or picks a component: set it when starting the "
                    "server, not per request")
        allowed = sorted(n for n, f in fields.items() if per_request(f))
        return f"unknown setting {path[1]!r} for {method}; settings a request may set: {allowed}"
    return f"{'.'.join(str(p) for p in path) or 'body'}: {error.get('msg')}"


def _body(model: Any) -> Any:
    """Decorator: the route's ``req`` parameter is the JSON body of type ``model`` (a model built at start-up,
    which a string annotation could not name)."""

    def typed(fn: Any) -> Any:
        fn.__annotations__ = {**fn.__annotations__, "req": Annotated[model, Body()]}
        return fn

    return typed


def _method_and_settings(req: Any) -> tuple[str | None, dict[str, Any]]:
    """(method or None for the server's default, the settings the request gave) of an ask body."""
    return getattr(req, "method", None), req.settings.model_dump(exclude_unset=True)


def _chat_question(messages: list[M.ChatMessage]) -> str:
    """The question of a chat: the last user message with text, else the last message with text."""
    for wanted in ("user", None):
        for m in reversed(messages):
            if (wanted is None or m.role == wanted) and m.content.strip():
                return m.content
    raise ConfigError("no message in 'messages' has any text")


def _chat_request_model(servable: list[str]) -> Any:
    """The chat body: OpenAI's, ``model`` naming a method; tandem's ``index`` and typed ``settings`` as
    extensions. Other OpenAI fields (temperature, n, ...) are accepted and ignored."""
    from pydantic import Discriminator, Tag

    variants = []
    for name in servable:
        settings = M.request_settings_model(METHODS.get(name))
        model = create_model(
            f"Chat{settings.__name__.removesuffix('RequestSettings')}",
            __config__=ConfigDict(extra="ignore"),
            model=(Literal[name], Field(description="A tandem method (GET /v1/models).")),  # type: ignore[valid-type]
            messages=(list[M.ChatMessage], Field(min_length=1, max_length=256)),
            stream=(bool, False),
            index=(str | None, Field(None, pattern=M.NAME_PATTERN, description="tandem extension: the index.")),
            settings=(settings, Field(default_factory=settings, description="tandem extension: method settings.")))
        variants.append(Annotated[model, Tag(name)])

    def tag(data: Any) -> str:
        value = data.get("model") if isinstance(data, dict) else getattr(data, "model", None)
        if not isinstance(value, str) or value not in servable:
            raise NotFound(f"unknown model {value!r}: a tandem method name, one of {servable}")
        return value

    return Annotated[typing.Union[tuple(variants)], Discriminator(tag)]  # noqa: UP007


def _allow_header_on_405(app: FastAPI, hints: dict[tuple[str, str], str]) -> None:
    """A method a route does not take gets 405 with ``Allow`` naming the methods it does (OPTIONS included;
    CORS preflights are answered before this, when CORS is on)."""

    known: dict[str, list[str]] = {}  # path -> the methods its routes take ([] for no API route); routes are fixed
                                      # once the app serves, so each path is matched against them once

    @app.middleware("http")
    async def allow(request: Request, call_next: Any) -> Any:
        path = request.url.path
        if path not in known:
            if len(known) > 4096:  # request paths are the client's: keep the memo bounded
                known.clear()
            known[path] = sorted({m for r in app.routes if isinstance(r, APIRoute) and r.path_regex.match(path)
                                  for m in r.methods or ()})
        allowed = known[path]
        if allowed and request.method not in allowed:
            hint = hints.get((request.method, path))
            return error_response(405, f"{request.method} is not allowed on {path}; allowed: {', '.join(allowed)}"
                          + (f": {hint}" if hint else ""), "MethodNotAllowed", {"Allow": ", ".join(allowed)})
        return await call_next(request)


def _error_for(exc: BaseException) -> JSONResponse:
    status = status_of(exc)
    return error_response(status, str(exc), type(exc).__name__, {"Retry-After": "2"} if status == 429 else None)
