"""The composition layer: one place that turns settings into a runnable method.

A method's folder holds its algorithm and its registry entry (:data:`tandem.registry.METHODS`): a builder
that receives the :class:`~tandem.methods.parts.Parts` built here - the LLM, the index, the search over it,
the store - and the method's validated settings, and builds what else it needs with the helpers of
:mod:`tandem.methods.parts` (a reranker, role LLMs, RaLa, an R²-Former checkpoint). The CLI, the trainers, the HTTP server and
Python callers all build a run through :func:`build_run` (methods alone: :func:`build_method`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tandem.config import RetrieverConfig
from tandem.errors import ConfigError
from tandem.index.index import Index, open_index
from tandem.index.store import DocStore
from tandem.llm.base import LLM
from tandem.methods.base import Method, Search
from tandem.methods.parts import Parts
from tandem.registry import METHODS
from tandem.settings import Settings
from tandem.types import Document

log = logging.getLogger(__name__)


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
    from tandem.llm.backends import load_llm
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


__all__ = ["Run", "build_method", "build_run", "index_behind", "needs_index"]
