"""What the framework adapters share: passages for a query and answers with their sources, from an
index folder in this process or from a running ``tandem serve`` over HTTP.

- :func:`open_search` -> a :class:`PassageSearch`: :class:`IndexSearch` (tandem's own retrievers over an
  index folder, what ``tandem retrieve`` runs; any kind, ``graph`` included) or :class:`ServerSearch`
  (the server's ``POST /v1/retrieve``).
- :func:`open_answerer` -> an :class:`Answerer`: :class:`EngineAnswerer` (the HTTP server's
  :class:`~tandem.server.engine.Engine` in this process: the same per-question loop, limits and refused
  settings) or :class:`ServerAnswerer` (the server's ``POST /v1/ask``).

Both return plain dicts: a passage is ``{"id", "title", "text", "score", "rank"}`` (``metadata`` where
the passage has some); an answer is the ``/v1/ask`` payload (``answer``, ``method``, ``cited``,
``trace``, ``cost``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from tandem.errors import ConfigError, TandemError
from tandem.index.index import Index
from tandem.llm.base import LLM
from tandem.secrets import redact
from tandem.server.payloads import Passage, passage

if TYPE_CHECKING:
    from tandem.server.engine import Engine

class ServerError(TandemError):
    """A tandem server could not be reached, or failed on a request that was not at fault."""

    exit_code = 1


class PassageSearch(Protocol):
    """Top-``k`` passages for a query, best first."""

    def search(self, query: str, k: int = 5) -> list[Passage]: ...

    async def asearch(self, query: str, k: int = 5) -> list[Passage]: ...


class Answerer(Protocol):
    """A tandem method answering one question -> the ``/v1/ask`` payload."""

    def ask(self, question: str) -> dict[str, Any]: ...

    async def aask(self, question: str) -> dict[str, Any]: ...


def is_url(source: str | Path | Index) -> bool:
    """True when ``source`` names a running server (``http://`` or ``https://``), not an index folder."""
    return isinstance(source, str) and source.startswith(("http://", "https://"))


class IndexSearch:
    """tandem's retriever of kind ``retriever`` (default: the index's own) over an index folder;
    ``options`` are the retriever's settings (``--retriever-opt`` of ``tandem retrieve``)."""

    def __init__(self, index: str | Path | Index, retriever: str | None = None, **options: Any) -> None:
        from tandem.index import open_index
        from tandem.retrieve import open_retriever

        self.index = index if isinstance(index, Index) else open_index(index)
        self.retriever = open_retriever(self.index, retriever, **options)

    def search(self, query: str, k: int = 5) -> list[Passage]:
        """Top-``k`` passages for ``query``."""
        store = self.index.store
        return [passage({**h.to_dict(), **store.get(h.doc_id).to_dict()}) for h in self.retriever.search(query, k)]

    async def asearch(self, query: str, k: int = 5) -> list[Passage]:
        """:meth:`search` on a worker thread."""
        return await asyncio.to_thread(self.search, query, k)


class ServerClient:
    """The ``/v1`` routes of a running ``tandem serve`` (httpx), its errors as tandem's: a request the
    server refused (4xx) is a :class:`ConfigError` with the server's message, anything else a
    :class:`ServerError`."""

    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 300.0) -> None:
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = timeout
        # one TLS context (building one reads the CA bundle: ~70 ms) and one pooled client for sync calls
        self._tls = httpx.create_ssl_context()
        self._client = httpx.Client(timeout=timeout, headers=self.headers, verify=self._tls)

    def post(self, route: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``route`` -> the JSON reply."""
        try:
            return self._reply(route, self._client.post(self.url + route, json=dict(body)))
        except httpx.HTTPError as exc:
            raise ServerError(f"{self.url}{route}: {type(exc).__name__}: {exc}") from exc

    async def apost(self, route: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """:meth:`post` without blocking the event loop (a client per call: an async client is bound
        to the event loop that first used it)."""
        try:
            async with httpx.AsyncClient(timeout=self.timeout, headers=self.headers, verify=self._tls) as client:
                return self._reply(route, await client.post(self.url + route, json=dict(body)))
        except httpx.HTTPError as exc:
            raise ServerError(f"{self.url}{route}: {type(exc).__name__}: {exc}") from exc

    def _reply(self, route: str, response: httpx.Response) -> dict[str, Any]:
        if response.is_success:
            return response.json()
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = response.text[:500]
        error = ConfigError if 400 <= response.status_code < 500 else ServerError
        raise error(redact(f"{self.url}{route} answered {response.status_code}: {message}"))


class ServerSearch:
    """The server's ``POST /v1/retrieve`` over its index ``index`` (default: its first) with retriever
    kind ``retriever`` (default: the index's own)."""

    def __init__(self, url: str, *, index: str | None = None, retriever: str | None = None,
                 api_key: str | None = None, timeout: float = 300.0) -> None:
        self.client = ServerClient(url, api_key=api_key, timeout=timeout)
        self.index, self.retriever = index, retriever

    def _body(self, query: str, k: int) -> dict[str, Any]:
        return {"query": query, "k": k, "index": self.index, "retriever": self.retriever}

    def search(self, query: str, k: int = 5) -> list[Passage]:
        """Top-``k`` passages for ``query``."""
        return [passage(h) for h in self.client.post("/v1/retrieve", self._body(query, k))["hits"]]

    async def asearch(self, query: str, k: int = 5) -> list[Passage]:
        """:meth:`search` without blocking the event loop."""
        return [passage(h) for h in (await self.client.apost("/v1/retrieve", self._body(query, k)))["hits"]]


def open_search(source: str | Path | Index, *, retriever: str | None = None, index: str | None = None,
                api_key: str | None = None, **options: Any) -> PassageSearch:
    """A search over ``source``: an index folder (or an opened :class:`Index`), or a server's URL.
    ``index`` names one of the server's indexes; ``options`` (retriever settings) apply to a folder."""
    if is_url(source):
        if options:
            raise ConfigError(f"retriever settings {sorted(options)} apply to an index folder; "
                              "a server uses the settings it was started with")
        return ServerSearch(str(source), index=index, retriever=retriever, api_key=api_key)
    if index is not None:
        raise ConfigError("index= names one of a server's indexes; give the folder itself as the source")
    return IndexSearch(source, retriever, **options)


class EngineAnswerer:
    """Method ``method`` with ``settings`` answering through ``engine`` (the HTTP server's engine: the
    settings a request may not set are refused here too)."""

    def __init__(self, engine: Engine, method: str | None = None, *, index: str | None = None,
                 settings: Mapping[str, Any] | None = None) -> None:
        self.engine, self.method, self.index, self.settings = engine, method, index, dict(settings or {})
        engine.method(method, index, self.settings)  # bad method, index or settings fail here, not at the first ask

    def ask(self, question: str) -> dict[str, Any]:
        """Answer ``question`` in the calling thread."""
        return self.engine.ask(question, self.method, self.index, self.settings)

    async def aask(self, question: str) -> dict[str, Any]:
        """Answer ``question`` on one of the engine's workers (its queue's limit applies)."""
        return await asyncio.wrap_future(self.engine.submit(self.ask, question))


class ServerAnswerer:
    """The server's ``POST /v1/ask`` with method ``method`` (default: the server's), index and settings."""

    def __init__(self, url: str, method: str | None = None, *, index: str | None = None,
                 settings: Mapping[str, Any] | None = None, api_key: str | None = None, timeout: float = 600.0) -> None:
        self.client = ServerClient(url, api_key=api_key, timeout=timeout)
        self.body = {"method": method, "index": index, "settings": dict(settings or {})}

    def ask(self, question: str) -> dict[str, Any]:
        """Answer ``question`` (blocks until the server replies)."""
        return self.client.post("/v1/ask", {"question": question, **self.body})

    async def aask(self, question: str) -> dict[str, Any]:
        """:meth:`ask` without blocking the event loop."""
        return await self.client.apost("/v1/ask", {"question": question, **self.body})


def open_answerer(source: str | Path | Engine, method: str | None = None, *, llm: str | LLM = "local",
                  index: str | None = None, settings: Mapping[str, Any] | None = None,
                  api_key: str | None = None, llm_opts: Mapping[str, Any] | None = None) -> Answerer:
    """Method ``method`` answering over ``source``: a server's URL, an index folder (an engine over it
    with ``llm`` is built here; method default: the registry's) or an :class:`~tandem.server.engine.Engine`."""
    from tandem.server.engine import Engine

    if is_url(source):
        return ServerAnswerer(str(source), method, index=index, settings=settings, api_key=api_key)
    if isinstance(source, Engine):
        return EngineAnswerer(source, method, index=index, settings=settings)
    if index is not None:
        raise ConfigError("index= names one of a server's indexes; give the folder itself as the source")
    folder = Path(source)
    engine = Engine({folder.name: folder}, llm, method=method, llm_opts=llm_opts, workers=1)
    return EngineAnswerer(engine, method, settings=settings)
