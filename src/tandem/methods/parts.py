"""What a method's builder is handed and the helpers it builds the rest with: :class:`Parts` (the LLM, the
index, the search over it, the store), a reranker from the method's settings (:func:`read_with_reranker`,
:func:`build_reranker`), role LLMs (:func:`load_role_llms`) and the index's dense part (:func:`dense_search`).
The methods' folders import this module; the composition layer above them (:mod:`tandem.compose`) builds the
Parts and calls the builders."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tandem.errors import ConfigError
from tandem.index.index import Index
from tandem.index.store import DocStore
from tandem.llm.base import LLM
from tandem.methods.base import Method, Search
from tandem.methods.settings import RerankSettings
from tandem.registry import RERANKERS
from tandem.rerank.base import Reranker

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Parts:
    """What a method is built from: the LLM, the index (if any), the search over it and the store that
    resolves document ids (the index's, or the dataset's passages for methods that read gold ones).
    ``notes`` collects what the build decided that a run should record (e.g. a reranker skipped)."""

    llm: LLM
    index: Index | None = None
    search: Search | None = None
    store: DocStore | None = None
    notes: dict[str, str] = field(default_factory=dict)

    def need_search(self, method: str) -> Search:
        if self.search is None:
            raise ConfigError(f"method {method!r} retrieves: give it an index (--index DIR)")
        return self.search

    def need_store(self, method: str) -> DocStore:
        if self.store is None:
            raise ConfigError(f"method {method!r} reads gold passages: give it the dataset's passages or an index")
        return self.store


def build_reranker(s: RerankSettings, store: DocStore, index: Index | None = None) -> Reranker | None:
    """The reranker ``s.reranker`` names (an entry of :data:`tandem.registry.RERANKERS`: ``bi_encoder``,
    ``cross_encoder``, ...) over ``store`` and ``index``; ``none`` -> None."""
    if s.reranker == "none":
        return None
    return RERANKERS.get(s.reranker).build(s, store, index)


def identity_rerank(s: RerankSettings, first: Any, index: Index | None) -> str | None:
    """Why ``s``'s reranker would reorder nothing over the first stage ``first``, or None. A bi-encoder with the
    index's own encoder re-scores a dense first stage over that index with the same query and document vectors,
    so its top-k equals the first stage's top-k."""
    if s.reranker != "bi_encoder" or s.reranker_model is not None or index is None:
        return None
    if getattr(first, "name", None) == "dense" and getattr(first, "index", None) is index:
        return (f"bi_encoder over a dense first stage with the same encoder ({index.manifest.encoder}) is the "
                "identity: set first_stage=bm25 (docs/methods/baselines.md), or reranker=cross_encoder")
    return None


def read_with_reranker(parts: Parts, method: str, s: RerankSettings, search: Search | None = None, *,
                       same_query: bool = True) -> tuple[Search, Reranker | None]:
    """A method's first stage (``s.first_stage``: the run's retriever, or one part of the index) and its reranker.
    When the reranker scores the first stage's own query (``same_query``), one that would be the identity
    (:func:`identity_rerank`) is skipped: logged and noted in ``parts``."""
    search = search or parts.need_search(method)
    if s.first_stage != "index":
        from tandem.retrieve import open_retriever

        if parts.index is None:
            raise ConfigError(f"{method}: first_stage={s.first_stage} needs the index behind the retriever")
        search = Search(open_retriever(parts.index, s.first_stage), search.store)
    why = identity_rerank(s, search.retriever, parts.index) if same_query else None
    if why is not None:
        log.warning("%s: reranker skipped: %s", method, why)
        parts.notes["rerank"] = f"skipped: {why}"
        return search, None
    reranker = build_reranker(s, search.store, parts.index)
    if reranker is not None:
        parts.notes["rerank"] = f"{search.retriever.name} first stage, then {reranker.name}"
    return search, reranker


def searching_with_reranker(name: str, cls: Callable[..., Method]) -> Callable[[Parts, Any], Method]:
    """The builder of a method that reads its first stage through its settings' reranker
    (:func:`read_with_reranker`): ``cls(llm, search, settings, reranker=...)`` (NativeRAG, IRCoT, Iter-RetGen,
    GenGround)."""

    def build(parts: Parts, s: Any) -> Method:
        search, reranker = read_with_reranker(parts, name, s)
        return cls(parts.llm, search, s, reranker=reranker)

    build.__doc__ = f"{name} over its first stage, with the settings' reranker."
    return build


def load_role_llms(llm: LLM, specs: Mapping[str, str | Mapping[str, Any]]) -> dict[str, LLM]:
    """Role -> LLM: ``llm`` itself where the spec is its own, else the spec loaded. A spec is a string, or a
    mapping of ``spec`` (a string, as the method's settings check) and that backend's options
    (``{"spec": "local:qwen2.5-coder-0.5b", "dtype": "bfloat16"}``), checked as ``--llm-opt`` is: a
    ConfigError names a bad option and the role."""
    from tandem.llm.backends import load_llm

    def one(role: str, spec: str | Mapping[str, Any]) -> LLM:
        if isinstance(spec, str):
            return llm if spec == llm.spec else load_llm(spec)
        opts = dict(spec)  # {"spec": SPEC, OPTION: VALUE, ...}: DualRAGSettings checked that "spec" is there
        name = opts.pop("spec")
        try:
            return load_llm(name, **opts)
        except ConfigError as exc:
            raise ConfigError(f"role_llms[{role!r}]: {exc}") from exc

    return {role: one(role, spec) for role, spec in specs.items()}


def dense_search(parts: Parts, search: Search) -> Search:
    """The index's dense part as the search (DualRAG's keywords, CoopRAG's first stage), when it has one and
    the search is the index's own kind; another retriever (``--retriever graph``, bm25 on a hybrid index) stays."""
    from tandem.retrieve.dense import DenseRetriever

    index = parts.index
    if index is None or not index.has("dense") or index.kind == "dense" or search.retriever.name != index.kind:
        return search
    return Search(DenseRetriever(parts.index), search.store)


__all__ = ["Parts", "build_reranker", "dense_search", "identity_rerank", "load_role_llms", "read_with_reranker",
           "searching_with_reranker"]
