"""The HTTP service's streamed replies: one ask's events as it works (:func:`run_streaming`), as Server-Sent Events
(:func:`sse`) or as OpenAI ``chat.completion.chunk`` events (:func:`chat_chunks`), and the status code each
error answers with (:data:`STATUS`)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from typing import Any

from tandem.errors import (
    Cancelled,
    ConfigError,
    Conflict,
    DataError,
    IndexMismatchError,
    LLMError,
    NotFound,
    TandemError,
)
from tandem.secrets import redact
from tandem.server.engine import Busy, Engine, call_in_loop

STATUS: dict[type[Exception], int] = {Busy: 429, NotFound: 404, Conflict: 409, ConfigError: 422, DataError: 422,
                                      IndexMismatchError: 422, LLMError: 502, Cancelled: 499, TandemError: 400}


async def run_streaming(engine: Engine, question: str, method: str | None, index: str | None,
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
        call_in_loop(loop, queue.put_nowait, ("step", step))

    future = engine.submit(engine.ask, question, method, index, settings, on_step, cancelled)
    future.add_done_callback(lambda f: call_in_loop(loop, queue.put_nowait, ("done", None)))
    try:
        yield ("started", None)
        while True:
            kind, data = await queue.get()
            if kind == "step":
                yield kind, data
                continue
            exc = future.exception()
            if exc is not None:
                status = status_of(exc)
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


async def sse(first: tuple[str, Any], events: AsyncIterator[tuple[str, Any]]) -> AsyncIterator[str]:
    yield ": started\n\n"
    try:
        async for kind, data in events:
            yield f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
    finally:
        await events.aclose()


async def chat_chunks(first: tuple[str, Any], events: AsyncIterator[tuple[str, Any]], cid: str, created: int,
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
                yield chunk({}, "stop", usage=usage(data), tandem=data)
            else:
                yield f"data: {json.dumps({'error': data})}\n\n"
        yield "data: [DONE]\n\n"
    finally:
        await events.aclose()


def usage(result: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's usage object for an answer's cost (tokens from the prefix cache as ``cached_tokens``)."""
    cost = result["cost"]
    return {"prompt_tokens": cost["prompt_tokens"], "completion_tokens": cost["completion_tokens"],
            "total_tokens": cost["prompt_tokens"] + cost["completion_tokens"],
            "prompt_tokens_details": {"cached_tokens": cost.get("reused_tokens", 0)}}


def status_of(exc: BaseException) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500
