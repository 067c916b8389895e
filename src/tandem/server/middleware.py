"""The HTTP service's ASGI middleware: body limits (:class:`BodyLimit`) and a reply to requests cut off by a
stop (:class:`StopReply`), and the JSON error reply they and the routes send (:func:`error_response`)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi.responses import JSONResponse

from tandem.io import SURROGATE, lone_surrogate
from tandem.secrets import redact


class _Constant(Exception):
    """``NaN``, ``Infinity`` or ``-Infinity`` in a body (Python's JSON reads them; JSON has no such numbers)."""


def unanswerable(body: bytes) -> str | None:
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


def error_response(status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The JSON error reply (``{"error": {"message", "type"}}``), the message redacted of secrets."""
    return JSONResponse({"error": {"message": redact(message), "type": kind}}, status_code=status, headers=headers)


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
                response = error_response(413, f"request body over the limit of {limit} bytes", "too_large")
                await response(scope, receive, send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if (reason := unanswerable(body)) is not None:
            await error_response(400, f"request body holds {reason}", "bad_request")(scope, receive, send)
            return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


STOPPED = "the server stopped before this request was answered; send it again when the server is back"


class StopReply:
    """ASGI middleware: a request still running when the server's grace period ends (uvicorn cancels
    it) gets 503 saying so, instead of uvicorn's bare 500 and a traceback in the log; a stream already
    started ends with an error event in its own format (``/v1/ask/stream``'s ``error`` event, or a
    chat chunk holding ``error``)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = streaming = False

        async def tracked(message: dict[str, Any]) -> None:
            nonlocal started, streaming
            if message["type"] == "http.response.start":
                started = True
                streaming = dict(message.get("headers", [])).get(b"content-type", b"").startswith(b"text/event-stream")
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError:
            if not started:
                await error_response(503, STOPPED, "unavailable")(scope, receive, send)
                return
            error, event = {"status": 503, "message": STOPPED, "type": "unavailable"}, ""
            if streaming and scope["path"].startswith("/v1/chat/"):
                event = f"data: {json.dumps({'error': error})}\n\n"
            elif streaming:
                event = f"event: error\ndata: {json.dumps(error)}\n\n"
            await send({"type": "http.response.body", "body": event.encode(), "more_body": False})
