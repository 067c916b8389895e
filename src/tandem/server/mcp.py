"""A Model Context Protocol server over the HTTP server's :class:`~tandem.server.engine.Engine` (the
official ``mcp`` SDK; ``tandem mcp`` runs it over stdio or streamable HTTP). Extra ``mcp``.

Tools: ``search`` (query, k, retriever, index -> passages with ids, titles, scores), ``ask`` (question,
method, index, settings -> the answer, the cited passages and a short chain of evidence),
``list_indexes`` and ``list_methods`` (each method's description, the JSON Schema of the settings a
caller may set, and those refused). Resource template ``passage://{index}/{doc_id}``: one passage as JSON.

The engine answers every call: the same per-question loop, work queue and refusals as the HTTP API
(settings that name a model, an LLM or a file; numbers out of range; questions over ``max_question``
characters). Bad input is a tool error whose message names the problem; the server keeps running.
``ask`` reports each step as a progress notification, and a cancelled call stops the method at its next
step or LLM call.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import threading
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field

from tandem.errors import ConfigError, TandemError
from tandem.io import check_text
from tandem.registry import METHODS
from tandem.secrets import redact
from tandem.server.engine import Engine, Lane, call_in_loop
from tandem.server.payloads import evidence, passage
from tandem.server.schemas import request_settings_model
from tandem.settings import per_request
from tandem.version import __version__

try:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
    from mcp.types import ToolAnnotations
except ImportError as exc:  # pragma: no cover - the extra is installed by scripts/setup.sh
    raise ConfigError("tandem mcp needs the MCP SDK: pip install 'tandem[mcp]'") from exc

T = TypeVar("T")
INSTRUCTIONS = ("tandem: retrieval-augmented multi-hop question answering. `search` finds passages in an "
                "index; `ask` answers a question with a method (DualRAG, CoopRAG, IRCoT, ...) and returns the "
                "passages it read and its chain of evidence; `list_indexes` and `list_methods` say what there is.")
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)  # every tool: nothing is changed
RetrieverKind = Literal["bm25", "dense", "hybrid", "graph"]


def create_mcp(engine: Engine, *, max_question: int = 2000) -> MCPServer:
    """The MCP server over ``engine``; questions and queries over ``max_question`` characters are refused."""
    server = MCPServer("tandem", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")

    async def run(fn: Callable[..., T], *args: Any, lane: Lane = "questions") -> T:
        """``fn`` on one of the engine's workers of ``lane`` (its queue's limit applies); tandem's errors as
        tool errors."""
        try:
            return await asyncio.wrap_future(engine.submit(fn, *args, lane=lane))
        except TandemError as exc:
            raise ToolError(redact(str(exc))) from exc

    def check(what: str, text: str) -> None:
        try:
            check_text(what, text, max_question)
        except ConfigError as exc:
            raise ToolError(str(exc)) from None

    @server.tool(annotations=READ_ONLY)
    async def search(query: Annotated[str, Field(min_length=1, description="What to search for.")],
                     k: Annotated[int, Field(ge=1, le=100, description="How many passages.")] = 5,
                     retriever: Annotated[RetrieverKind | None, Field(
                         description="Retriever kind (default: the index's own); graph follows links between passages.")] = None,
                     index: Annotated[str | None, Field(description="An index name (list_indexes); default: the first.")] = None,
                     ) -> dict[str, Any]:
        """The top-k passages of an index for a query, best first: id, title, text, score, rank."""
        check("query", query)
        hits = await run(engine.retrieve, query, index, k, retriever, lane="searches")
        return {"query": query, "index": index or engine.default_index, "passages": [passage(h) for h in hits]}

    @server.tool(annotations=READ_ONLY)
    async def ask(question: Annotated[str, Field(min_length=1, description="The question.")],
                  ctx: Context,
                  method: Annotated[str | None, Field(description="A method (list_methods); default: the server's.")] = None,
                  index: Annotated[str | None, Field(description="An index name (list_indexes); default: the first.")] = None,
                  settings: Annotated[dict[str, Any] | None, Field(
                      description="Method settings, e.g. {\"max_iter\": 3} (list_methods gives each method's).")] = None,
                  ) -> dict[str, Any]:
        """Answer a question with a tandem method: the answer, the passages shown to the LLM (cited), a
        short chain of evidence (each step's queries, passages found and notes) and the cost. Each step
        is reported as a progress notification as it completes."""
        check("question", question)
        loop = asyncio.get_running_loop()
        stop = threading.Event()

        reported: list[int] = []
        sending: set[asyncio.Task[Any]] = set()  # progress notifications under way (kept until sent)

        def report(step: dict[str, Any]) -> None:  # on the loop
            task = loop.create_task(ctx.report_progress(step["index"] + 1, None, step_summary(step)))
            sending.add(task)
            task.add_done_callback(sending.discard)

        def on_step(step: dict[str, Any]) -> None:  # on the worker: the notification is sent from the loop
            reported.append(step["index"])
            call_in_loop(loop, report, step)

        try:
            result = await run(engine.ask, question, method, index, settings or {}, on_step, stop)
        finally:
            stop.set()  # a call the client cancelled stops the method at its next step or LLM call
        for step in result["trace"]["steps"][(reported[-1] + 1) if reported else 0:]:  # the last step ends with the answer
            await ctx.report_progress(step["index"] + 1, None, step_summary(step))
        return {"answer": result["answer"], "method": result["method"],
                "cited": [{k: p[k] for k in ("id", "title", "text") if k in p} for p in result["cited"]],
                "evidence": evidence(result), "cost": result["cost"]}

    @server.tool(annotations=READ_ONLY)
    def list_indexes() -> dict[str, Any]:
        """The indexes this server searches: name, kind, passages, encoder; the default is the first."""
        return {"default": engine.default_index,
                "indexes": [{"name": n, "kind": i.kind, "documents": i.manifest.doc_count,
                             "encoder": i.manifest.encoder} for n, i in engine.indexes.items()]}

    @server.tool(annotations=READ_ONLY)
    def list_methods(method: Annotated[str | None, Field(description="One method; default: every method.")] = None,
                     ) -> dict[str, Any]:
        """The methods `ask` runs: each one's description, the JSON Schema of the settings a caller may
        set, and the settings refused here (they load a model or file: set when the server starts)."""
        if method is not None and method not in METHODS:
            raise ToolError(f"unknown method {method!r}; choose one of {METHODS.names()}")
        return {"default": engine.default_method,
                "methods": [settings_schema(name) for name in ([method] if method else METHODS.names())]}

    @server.resource("passage://{index}/{doc_id}", mime_type="application/json",
                     description="One passage of an index by its id, as JSON (id, title, text).")
    def read_passage(index: str, doc_id: str) -> str:
        try:
            store = engine.index(index).store
        except ConfigError as exc:
            raise ResourceNotFoundError(str(exc)) from exc
        if doc_id not in store:
            raise ResourceNotFoundError(f"index {index!r} has no passage {doc_id!r}")
        return json.dumps(store.get(doc_id).to_dict(), ensure_ascii=False)

    return server


class BearerKey:
    """ASGI middleware: every HTTP request needs ``Authorization: Bearer KEY`` (compared in constant time);
    anything else gets 401 before it reaches the MCP transport."""

    def __init__(self, app: Any, key: str) -> None:
        self.app, self.expected = app, f"Bearer {key}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not hmac.compare_digest(dict(scope["headers"]).get(b"authorization", b""),
                                                               self.expected):
            from starlette.responses import JSONResponse

            response = JSONResponse({"error": {"message": "missing or wrong API key (Authorization: Bearer KEY)",
                                               "type": "unauthorized"}}, status_code=401,
                                    headers={"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def http_app(server: MCPServer, *, host: str = "127.0.0.1", api_key: str | None = None) -> Any:
    """The streamable HTTP app (endpoint ``/mcp``; DNS-rebinding checks on a loopback ``host``), behind
    an API key when one is given."""
    app = server.streamable_http_app(host=host)
    return BearerKey(app, api_key) if api_key else app


def step_summary(step: dict[str, Any]) -> str:
    """One line for a completed step: its name, its queries and the titles it found."""
    titles = ", ".join(str(h.get("title") or h["doc_id"]) for h in step["hits"][:5])
    queries = "; ".join(step["queries"])
    return f"{step['name']}" + (f": {queries}" if queries else "") + (f" -> {titles}" if titles else "")


def settings_schema(method: str) -> dict[str, Any]:
    """Method ``method``'s description, the JSON Schema of the settings a request may set (the HTTP API's,
    :func:`tandem.server.schemas.request_settings_model`), and the names of those it may not."""
    entry = METHODS.get(method)
    schema = request_settings_model(entry).model_json_schema()
    refused = sorted(name for name, info in entry.settings.model_fields.items() if not per_request(info))
    schema.pop("description", None)
    return {"name": method, "description": entry.doc, "settings_schema": schema, "refused": refused}
