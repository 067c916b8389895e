"""The API's routes, in two routers over one :class:`~tandem.server.engine.Engine`: what the server holds
(:func:`catalog_router`: health, methods, models, indexes, uploads) and what it answers (:func:`answer_router`:
retrieve, ask, ask/stream, the OpenAI-compatible chat). :func:`tandem.server.app.create_app` puts them
together with the guards and the error handlers."""

from __future__ import annotations

import asyncio
import time
import typing
import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body
from fastapi.responses import StreamingResponse
from pydantic import ConfigDict, Field, create_model

from tandem.errors import ConfigError, NotFound
from tandem.io import check_text
from tandem.registry import METHODS
from tandem.server import schemas as M
from tandem.server.engine import UPLOAD_NAME, UPLOAD_SUFFIXES, Engine
from tandem.server.streaming import chat_chunks, run_streaming, sse, usage
from tandem.version import __version__

STARTED = int(time.time())
errors = M.error_responses


class RetrieveRequest(M.Strict):
    """``POST /v1/retrieve``: a query, the index to search and how many hits."""

    query: str = Field(min_length=1, pattern=M.TEXT_PATTERN, description="The search query.")
    index: str | None = Field(None, pattern=M.NAME_PATTERN, description="An index name; default: the first.")
    k: int = Field(5, ge=1, le=100, description="Hits to return.")


class UploadRequest(M.Strict):
    """``POST /v1/indexes``: files to index under a new name, and the index's kind."""

    name: str = Field(pattern=M.NAME_PATTERN, description="The new index's name (letters, digits, '-', '_').")
    kind: Literal["bm25", "dense", "hybrid"] = "bm25"
    files: dict[Annotated[str, Field(pattern=UPLOAD_NAME)],
                str] = Field(min_length=1, description=f"File name ({', '.join(UPLOAD_SUFFIXES)}) -> its text.",
                             json_schema_extra={"additionalProperties": False})


def catalog_router(engine: Engine, servable: list[str]) -> APIRouter:
    """``/healthz``, ``/v1/methods``, ``/v1/models``, ``/v1/indexes`` (and uploads with their jobs, where the
    engine takes them)."""
    router = APIRouter()

    @router.get("/healthz", response_model=M.Health)
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "version": __version__}

    @router.get("/v1/methods", response_model=M.MethodsResponse, responses=errors(401))
    async def methods() -> dict[str, Any]:
        """Every registered method with its settings' defaults (``tandem methods NAME`` describes them)."""
        return {"default": engine.default_method,
                "methods": [{"name": e.name, "doc": e.doc, "needs": list(e.needs), "served": e.name in servable,
                             "settings": e.defaults()} for e in METHODS.entries()]}

    @router.get("/v1/models", response_model=M.ModelList, responses=errors(401))
    async def models() -> dict[str, Any]:
        """The methods this server answers with, in OpenAI's shape: ``model`` of a chat completion names one."""
        return {"object": "list", "data": [{"id": n, "object": "model", "created": STARTED, "owned_by": "tandem"}
                                           for n in servable]}

    @router.get("/v1/indexes", response_model=M.IndexesResponse, responses=errors(401))
    async def indexes() -> dict[str, Any]:
        return {"default": engine.default_index,
                "indexes": [{"name": n, "kind": i.kind, "documents": i.manifest.doc_count, "encoder": i.manifest.encoder}
                            for n, i in engine.indexes.items()]}

    if engine.uploads is not None:
        @router.post("/v1/indexes", status_code=202, response_model=M.Job, responses=errors(400, 401, 409, 413, 422, 429))
        async def upload(req: UploadRequest) -> dict[str, Any]:
            """Build an index from uploaded files in the background; poll GET /v1/jobs/{id}."""
            return engine.start_index_job(req.name, req.files, req.kind)

        @router.get("/v1/jobs/{job_id}", response_model=M.Job, responses=errors(401, 404))
        async def job(job_id: str) -> dict[str, Any]:
            if job_id not in engine.jobs:
                raise NotFound(f"no job {job_id!r}")
            return dict(engine.jobs[job_id])

    return router


def answer_router(engine: Engine, servable: list[str], default: str, max_question: int) -> APIRouter:
    """``/v1/retrieve``, ``/v1/ask``, ``/v1/ask/stream`` and ``/v1/chat/completions``, their bodies typed by the
    methods this server answers with (``default`` where a body names none)."""
    router = APIRouter()
    AskBody = M.ask_request_model([METHODS.get(n) for n in servable], default, max_question)  # noqa: N806
    ChatBody = _chat_request_model(servable)  # noqa: N806
    retrievers = engine.servable_retrievers()
    Retrieve = create_model("RetrieveBody", __base__=RetrieveRequest,  # noqa: N806
                            retriever=((Literal[tuple(retrievers)] if retrievers else None) | None,  # type: ignore[valid-type]
                                       Field(None, description="A retriever some index here can serve; "
                                                               "default: the index's own kind.")))

    @router.post("/v1/retrieve", response_model=M.RetrieveResponse, response_model_exclude_none=True,
              responses=errors(400, 401, 404, 413, 422, 429))
    @_body(Retrieve)
    async def retrieve(req: Any) -> dict[str, Any]:
        hits = await asyncio.wrap_future(engine.submit(engine.retrieve, req.query, req.index, req.k, req.retriever,
                                                         lane="searches"))
        return {"query": req.query, "hits": hits}

    @router.post("/v1/ask", response_model=M.AskResponse, responses=errors(400, 401, 404, 413, 422, 429, 502))
    @_body(AskBody)
    async def ask(req: Any) -> dict[str, Any]:
        method, settings = _method_and_settings(req)
        return await asyncio.wrap_future(engine.submit(engine.ask, req.question, method, req.index, settings))

    @router.post("/v1/ask/stream", response_class=StreamingResponse,
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

    @router.post("/v1/chat/completions", response_model=M.ChatCompletion,
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

    return router


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


__all__ = ["RetrieveRequest", "UploadRequest", "answer_router", "catalog_router"]
