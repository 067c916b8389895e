"""The composition layer: one place that turns settings into a runnable method.

A method's file holds its algorithm and, at its end, its registry entry (:data:`tandem.registry.METHODS`):
a builder that receives the :class:`Parts` built here - the LLM, the index, the search over it, the store -
and the method's validated settings, and builds what else it needs (a reranker through
:func:`build_reranker`, role LLMs, RaLa, an R²-Former checkpoint). The CLI, the trainers, the HTTP server and
Python callers all build a run through :func:`build_run` (methods alone: :func:`build_method`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tandem.config import RetrieverConfig
from tandem.errors import ConfigError
from tandem.index.index import Index, open_index
from tandem.index.store import DocStore
from tandem.llm.types import LLM
from tandem.methods.base import Method, Search
from tandem.methods.settings import RerankSettings
from tandem.registry import METHODS, RERANKERS
from tandem.rerank.base import Reranker
from tandem.settings import Settings
from tandem.types import Document

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


def load_role_llms(llm: LLM, specs: Mapping[str, str]) -> dict[str, LLM]:
    """Role -> LLM: ``llm`` itself where the spec is its own, else the spec loaded."""
    from tandem.llm.registry import load_llm

    return {role: llm if spec == llm.spec else load_llm(spec) for role, spec in specs.items()}


def dense_search(parts: Parts, search: Search) -> Search:
    """The index's dense part as the search (DualRAG's keywords, CoopRAG's first stage), when it has one and
    the search is the index's own kind; another retriever (``--retriever graph``, bm25 on a hybrid index) stays."""
    from tandem.retrieve.dense import DenseRetriever

    index = parts.index
    if index is None or not index.has("dense") or index.kind == "dense" or search.retriever.name != index.kind:
        return search
    return Search(DenseRetriever(parts.index), search.store)


def needs_index(method: str) -> bool:
    """Whether method ``method`` retrieves (its registry entry needs an index)."""
    return "index" in METHODS.get(method).needs


def index_behind(retriever: Any) -> Index | None:
    """The index a retriever searches (a hybrid's dense part preferred), for callers that hand
    :func:`build_method` a search without its index."""
    parts = [retriever, *getattr(retriever, "retrievers", [])]
    found: list[Index] = [r.index for r in parts if isinstance(getattr(r, "index", None), Index)]
    return next((i for i in found if i.has("dense")), found[0] if found else None)


def build_method(name: str, llm: LLM, search: Search | None = None, store: DocStore | None = None, *,
                 index: Index | None = None, settings: Settings | Mapping[str, Any] | None = None,
                 **more: Any) -> Method:
    """Method ``name`` built from its settings (a model, a mapping, or keywords; unknown keys are a
    ConfigError naming the valid ones). ``index`` defaults to the one behind ``search``'s retriever."""
    entry = METHODS.get(name)
    given = settings.to_dict() if isinstance(settings, Settings) else dict(settings or {})
    validated = entry.validate({**given, **more}, where=f"{name} settings")
    if index is None and search is not None:
        index = index_behind(search.retriever)
    parts = Parts(llm, index, search, store if store is not None else search.store if search else None)
    method = entry.build(parts, validated)
    if parts.notes:
        method.build_notes = parts.notes  # type: ignore[attr-defined] - recorded in the run's config
    return method


@dataclass(frozen=True)
class Run:
    """A run put together by :func:`build_run`: the method, the LLM it calls, the store that resolves its
    document ids and the index it searches (None where it reads none)."""

    method: Method
    llm: LLM
    store: DocStore | None
    index: Index | None


def build_run(method: str | None, llm: str | LLM, index: Index | str | Path | None = None,
              settings: Mapping[str, Any] | Settings | None = None, *, retriever: RetrieverConfig | None = None,
              passages: Sequence[Document] | None = None, llm_options: Mapping[str, Any] | None = None,
              keep_index_kind: bool = False) -> Run:
    """The one builder of a run, used by the CLI (``eval qa``, ``ask``), the Python API, the server, MCP and the
    integrations: the LLM loaded (a spec with ``llm_options``, or an LLM object as it is), the index opened (a
    folder or an :class:`Index`), the method ``method`` (the registry's default where None) built over it,
    searched with ``retriever`` (default: :func:`~tandem.retrieve.best_retriever`, the graph retriever where the
    index has that extra; ``keep_index_kind``: the index's own kind instead, as a paper preset asks) - or,
    without an index, over a store of ``passages`` for methods that read gold passages."""
    from tandem.llm.registry import load_llm
    from tandem.retrieve import best_retriever, open_retriever

    method = method or METHODS.default()
    if needs_index(method) and index is None:
        raise ConfigError(f"method {method!r} retrieves: give --index DIR (index: in a config)")
    model = load_llm(llm, **dict(llm_options or {})) if isinstance(llm, str) else llm
    idx = open_index(index) if isinstance(index, (str, Path)) else index
    search = store = None
    chosen = ""
    if idx is not None:
        ret = retriever or RetrieverConfig()
        # a preset, or settings given for the index's own kind (--retriever-opt without --retriever), keep that kind
        kind = ret.kind or (idx.kind if keep_index_kind or ret.settings else best_retriever(idx))
        chosen = "" if ret.kind or keep_index_kind else f"{kind} (the default: graph where the index has the graph extra)"
        search = Search(open_retriever(idx, kind, **ret.options(kind)), idx.store)
        store = idx.store
    if store is None and passages:
        store = DocStore(list(passages))
    built = build_method(method, model, search, store, index=idx, settings=settings)
    if chosen:  # recorded in a run's config.json notes: what searched, where the config left it to the default
        built.build_notes = {**getattr(built, "build_notes", {}), "retriever": chosen}  # type: ignore[attr-defined]
    return Run(built, model, store, idx)


__all__ = ["Parts", "Run", "build_method", "build_reranker", "build_run", "dense_search", "index_behind",
           "load_role_llms", "needs_index", "searching_with_reranker"]
