"""QA methods, one file each, behind the ``Method`` protocol; ``build_method`` wires one from a registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tandem.errors import ConfigError
from tandem.index.store import DocStore
from tandem.llm.types import LLM
from tandem.methods import cooprag, dualrag
from tandem.methods.base import Method, Search
from tandem.methods.direct import Direct
from tandem.methods.ircot import IRCoT
from tandem.methods.naive_rag import NaiveRAG
from tandem.methods.oracle import Oracle

# name -> factory(llm, search, store, **hyper-parameters)
METHODS: dict[str, Callable[..., Method]] = {
    "direct": lambda llm, search, store, **hp: Direct(llm, **hp),
    "naive_rag": lambda llm, search, store, **hp: NaiveRAG(llm, _need(search, "naive_rag"), **hp),
    "oracle": lambda llm, search, store, **hp: Oracle(llm, _need_store(store), **hp),
    "ircot": lambda llm, search, store, **hp: IRCoT(llm, _need(search, "ircot"), **hp),
    "dualrag": lambda llm, search, store, **hp: dualrag.from_settings(llm, _need(search, "dualrag"), **hp),
    "cooprag": lambda llm, search, store, **hp: cooprag.from_settings(llm, _need(search, "cooprag"), **hp),
    "r2ag": lambda llm, search, store, **hp: _r2ag(llm, search, store, **hp),
}
NEEDS_INDEX = {"naive_rag", "ircot", "dualrag", "cooprag", "r2ag"}


def _r2ag(llm: LLM, search: Search | None, store: DocStore | None, **hp: Any) -> Method:
    from tandem.methods import r2ag  # torch: imported only when the method is built

    return r2ag.from_settings(llm, search, store, **hp)


def _need(search: Search | None, name: str) -> Search:
    if search is None:
        raise ConfigError(f"method {name!r} retrieves: give it an index (--index DIR)")
    return search


def _need_store(store: DocStore | None) -> DocStore:
    if store is None:
        raise ConfigError("method 'oracle' reads gold passages: give it the dataset's passages or an index")
    return store


def build_method(name: str, llm: LLM, search: Search | None = None, store: DocStore | None = None,
                 **hyper: Any) -> Method:
    """Instantiate a registered method; unknown names and hyper-parameters are ConfigErrors."""
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; choose one of {sorted(METHODS)}")
    if store is None and search is not None:
        store = search.store
    try:
        return METHODS[name](llm, search, store, **hyper)
    except TypeError as exc:
        raise ConfigError(f"bad hyper-parameter for {name!r}: {exc}") from exc


__all__ = ["METHODS", "NEEDS_INDEX", "Method", "Search", "build_method"]
