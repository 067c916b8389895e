"""The HTTP API and web page (FastAPI): ``create_app(engine, ...)``; ``tandem serve`` runs it with uvicorn.

Routes (:mod:`tandem.server.routes`; OpenAPI at ``/docs``, every request and response typed:
:mod:`tandem.server.schemas`): ``GET /healthz``,
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

import hmac
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from tandem.errors import TandemError
from tandem.registry import METHODS
from tandem.secrets import register_secret
from tandem.server.engine import Engine
from tandem.server.middleware import BodyLimit, StopReply, error_response
from tandem.server.routes import answer_router, catalog_router
from tandem.server.streaming import status_of
from tandem.settings import per_request
from tandem.version import __version__

STATIC = Path(__file__).parent / "static"


def create_app(engine: Engine, *, api_key: str | None = None, max_body: int = 1 << 20, max_question: int = 2000,
               max_upload: int = 20 << 20, cors: list[str] | None = None) -> FastAPI:
    """The FastAPI app over ``engine``."""
    app = FastAPI(title="tandem", version=__version__, description=__doc__)
    app.state.engine = engine
    register_secret(api_key)
    servable = engine.servable_methods()
    default = app.state.default_method = engine.default_method if engine.default_method in servable else servable[0]
    routers = [catalog_router(engine, servable), answer_router(engine, servable, default, max_question)]

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
    _allow_header_on_405(app, [r for router in routers for r in router.routes if isinstance(r, APIRoute)],
                         {} if engine.uploads is not None else {
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

    for router in routers:
        app.include_router(router)
    app.mount("/", StaticFiles(directory=STATIC, html=True), name="page")
    return app


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


def _allow_header_on_405(app: FastAPI, routes: list[APIRoute], hints: dict[tuple[str, str], str]) -> None:
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
            known[path] = sorted({m for r in routes if r.path_regex.match(path) for m in r.methods or ()})
        allowed = known[path]
        if allowed and request.method not in allowed:
            hint = hints.get((request.method, path))
            return error_response(405, f"{request.method} is not allowed on {path}; allowed: {', '.join(allowed)}"
                          + (f": {hint}" if hint else ""), "MethodNotAllowed", {"Allow": ", ".join(allowed)})
        return await call_next(request)


def _error_for(exc: BaseException) -> JSONResponse:
    status = status_of(exc)
    return error_response(status, str(exc), type(exc).__name__, {"Retry-After": "2"} if status == 429 else None)
