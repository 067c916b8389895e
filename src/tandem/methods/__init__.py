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


def _signatures(name: str) -> list[Callable[..., Any]]:
    """The callables whose keyword parameters are method ``name``'s settings (factory, then class)."""
    if name == "r2ag":
        from tandem.methods import r2ag

        return [r2ag.from_settings, r2ag.R2AG]
    return {"direct": [Direct], "naive_rag": [NaiveRAG], "oracle": [Oracle], "ircot": [IRCoT],
            "dualrag": [dualrag.from_settings, dualrag.DualRAG], "cooprag": [cooprag.from_settings, cooprag.CoopRAG]}[name]


def method_settings(name: str) -> dict[str, Any]:
    """Method ``name``'s settings with their defaults (None where the default is not plain JSON)."""
    return {k: v["default"] for k, v in describe_settings(name).items()}


def describe_settings(name: str) -> dict[str, dict[str, Any]]:
    """Method ``name``'s settings: each one's ``default`` (None where not plain JSON) and ``type``
    (its annotation), read from the factory's and the class's signatures."""
    import inspect

    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; choose one of {sorted(METHODS)}")
    out: dict[str, dict[str, Any]] = {}
    for target in _signatures(name):
        for pname, param in inspect.signature(target).parameters.items():
            if pname in {"llm", "search", "store", "self", "model", "encoder_model"} or param.kind in (
                    param.VAR_POSITIONAL, param.VAR_KEYWORD) or pname in out:
                continue
            if param.kind is param.POSITIONAL_OR_KEYWORD and param.default is inspect.Parameter.empty:
                continue  # a positional part the factory supplies (the backend, the R²-Former, ...)
            default = param.default
            plain = isinstance(default, (str, int, float, bool, type(None)))
            annotation = param.annotation if isinstance(param.annotation, str) else getattr(param.annotation, "__name__", "")
            out[pname] = {"default": default if plain else None, "type": annotation}
    return out


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
    unknown = sorted(set(hyper) - set(method_settings(name)))
    if unknown:
        raise ConfigError(f"unknown setting(s) {unknown} for {name!r}; settings: {sorted(method_settings(name))}")
    return METHODS[name](llm, search, store, **hyper)


__all__ = ["METHODS", "NEEDS_INDEX", "Method", "Search", "build_method"]
