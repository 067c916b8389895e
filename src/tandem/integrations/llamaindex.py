"""LlamaIndex: :class:`TandemRetriever` (a ``BaseRetriever`` returning ``NodeWithScore``) over an index
folder or a running ``tandem serve``, any retriever kind (``graph`` included), and
:class:`TandemQueryEngine`, a tandem method as a query engine whose ``Response`` carries the answer and
its cited passages as source nodes. Extra ``llamaindex`` (``llama-index-core``).

    retriever = TandemRetriever("indexes/dev500", retriever="graph", k=5)
    nodes = retriever.retrieve("Who portrayed Corliss Archer in Kiss and Tell?")
    response = TandemQueryEngine("indexes/dev500").query("...")  # the default method; or name one
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tandem.errors import ConfigError
from tandem.integrations.base import Passage, open_answerer, open_search
from tandem.llm.base import LLM

try:
    from llama_index.core.base.base_query_engine import BaseQueryEngine
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.base.response.schema import Response
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as exc:  # pragma: no cover - the extra is installed by scripts/setup.sh
    raise ConfigError("tandem.integrations.llamaindex needs llama-index-core: pip install 'tandem[llamaindex]'") from exc


def to_node(p: Passage) -> NodeWithScore:
    """A tandem passage as a ``NodeWithScore``: a ``TextNode`` with the passage's id, text and title
    (plus its rank and own metadata), scored by the retriever (``None`` for a cited passage)."""
    meta = {"title": p.get("title", ""), **({"rank": p["rank"]} if "rank" in p else {}), **(p.get("metadata") or {})}
    return NodeWithScore(node=TextNode(id_=p["id"], text=p["text"], metadata=meta), score=p.get("score"))


class TandemRetriever(BaseRetriever):
    """Top-``k`` passages from ``source``: an index folder (tandem's own retrievers, what ``tandem
    retrieve`` runs) or a ``tandem serve`` URL (its ``/v1/retrieve``). ``retriever``: bm25, dense,
    hybrid or graph (default: the index's kind); ``index``: one of a server's indexes; ``options``:
    retriever settings for a folder (graph: seeds, damping, ...)."""

    def __init__(self, source: str | Path, *, k: int = 5, retriever: str | None = None, index: str | None = None,
                 api_key: str | None = None, **options: Any) -> None:
        if not 1 <= k <= 100:
            raise ConfigError(f"k = {k}: give 1..100")
        super().__init__()
        self.k = k
        self._search = open_search(source, retriever=retriever, index=index, api_key=api_key, **options)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [to_node(p) for p in self._search.search(query_bundle.query_str, self.k)]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [to_node(p) for p in await self._search.asearch(query_bundle.query_str, self.k)]


class TandemQueryEngine(BaseQueryEngine):
    """Method ``method`` answering over ``source`` (an index folder answered here with ``llm``, a
    ``tandem serve`` URL or an :class:`~tandem.server.engine.Engine`): ``query`` returns a ``Response``
    with the answer, the cited passages as ``source_nodes`` and the method, trace and cost in
    ``metadata``."""

    def __init__(self, source: str | Path | Any, method: str | None = None, *, llm: str | LLM = "local",
                 index: str | None = None, settings: dict[str, Any] | None = None, api_key: str | None = None) -> None:
        super().__init__(callback_manager=None)
        self._answerer = open_answerer(source, method, llm=llm, index=index, settings=settings, api_key=api_key)

    def _get_prompt_modules(self) -> dict[str, Any]:
        return {}

    @staticmethod
    def _response(result: dict[str, Any]) -> Response:
        return Response(response=result["answer"], source_nodes=[to_node(p) for p in result["cited"]],
                        metadata={k: result[k] for k in ("method", "trace", "cost")})

    def _query(self, query_bundle: QueryBundle) -> Response:
        return self._response(self._answerer.ask(query_bundle.query_str))

    async def _aquery(self, query_bundle: QueryBundle) -> Response:
        return self._response(await self._answerer.aask(query_bundle.query_str))
