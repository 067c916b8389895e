"""LangChain: :class:`TandemRetriever` (a ``BaseRetriever``, sync and async) over an index folder or a
running ``tandem serve``, any retriever kind (``graph`` included), and :func:`method_runnable`, a tandem
method as a ``Runnable`` answering with its sources. Extra ``langchain`` (``langchain-core``).

    retriever = TandemRetriever(source="indexes/dev500", retriever="graph", k=5)
    docs = retriever.invoke("Who portrayed Corliss Archer in Kiss and Tell?")
    chain = method_runnable("indexes/dev500") | (lambda r: r["answer"])  # the default method; or name one
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, PrivateAttr

from tandem.errors import ConfigError
from tandem.integrations.base import Answerer, Passage, PassageSearch, open_answerer, open_search
from tandem.llm.base import LLM

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import Runnable, RunnableLambda
except ImportError as exc:  # pragma: no cover - the extra is installed by scripts/setup.sh
    raise ConfigError("tandem.integrations.langchain needs langchain-core: pip install 'tandem[langchain]'") from exc


def to_document(p: Passage) -> Document:
    """A tandem passage as a LangChain ``Document``: the text as content; id, title, score, rank and the
    passage's own metadata in ``metadata``."""
    meta = {"id": p["id"], "title": p.get("title", ""), **{k: p[k] for k in ("score", "rank") if k in p},
            **(p.get("metadata") or {})}
    return Document(page_content=p["text"], metadata=meta, id=p["id"])


class TandemRetriever(BaseRetriever):
    """Top-``k`` passages from ``source``: an index folder (tandem's own retrievers, what ``tandem
    retrieve`` runs) or a ``tandem serve`` URL (its ``/v1/retrieve``). ``retriever``: bm25, dense,
    hybrid or graph (default: the index's kind); ``index``: one of a server's indexes; ``options``:
    retriever settings for a folder (graph: seeds, damping, ...)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    source: str | Path
    k: int = Field(5, ge=1, le=100)
    retriever: str | None = None
    index: str | None = None
    api_key: str | None = Field(None, repr=False)
    options: dict[str, Any] = Field(default_factory=dict)
    _search: PassageSearch = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        self._search = open_search(self.source, retriever=self.retriever, index=self.index, api_key=self.api_key,
                                   **self.options)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return [to_document(p) for p in self._search.search(query, self.k)]

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun) -> list[Document]:
        return [to_document(p) for p in await self._search.asearch(query, self.k)]


def _question(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("question"), str):
        return value["question"]
    raise ConfigError(f"a tandem method runnable takes a question: a string or {{'question': str}}, "
                      f"got {type(value).__name__}")


def _output(question: str, result: dict[str, Any]) -> dict[str, Any]:
    return {"question": question, "answer": result["answer"], "sources": [to_document(p) for p in result["cited"]],
            "method": result["method"], "trace": result["trace"], "cost": result["cost"]}


def method_runnable(source: str | Path | Any, method: str | None = None, *, llm: str | LLM = "local",
                    index: str | None = None, settings: dict[str, Any] | None = None,
                    api_key: str | None = None) -> Runnable[Any, dict[str, Any]]:
    """Method ``method`` as a ``Runnable``: a question (a string or ``{"question": ...}``) in;
    ``{"question", "answer", "sources" (the cited passages as Documents), "method", "trace", "cost"}``
    out. ``source``: an index folder (answered here with ``llm``), a ``tandem serve`` URL or an
    :class:`~tandem.server.engine.Engine`; see :func:`tandem.integrations.base.open_answerer`."""
    answerer: Answerer = open_answerer(source, method, llm=llm, index=index, settings=settings, api_key=api_key)

    def answer(value: Any) -> dict[str, Any]:
        question = _question(value)
        return _output(question, answerer.ask(question))

    async def aanswer(value: Any) -> dict[str, Any]:
        question = _question(value)
        return _output(question, await answerer.aask(question))

    return RunnableLambda(answer, afunc=aanswer, name=f"tandem:{method or 'default'}")
