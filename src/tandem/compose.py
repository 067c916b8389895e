"""The composition layer: one place that turns settings into a runnable method.

A method's file holds its algorithm and nothing else; here its settings (``tandem.methods.settings``)
are validated and its parts built - the retriever over the index, the reranker, role LLMs, RaLa, the
R²-Former checkpoint - and handed to it. The CLI, the trainers, the HTTP server and Python callers all
build methods through :func:`build_method` / :func:`build_runnable`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tandem.config import RetrieverConfig, Settings
from tandem.errors import ConfigError
from tandem.index.build import Index
from tandem.index.store import DocStore
from tandem.llm.types import LLM
from tandem.methods.base import Method, Search
from tandem.methods.cooprag import CoopRAG
from tandem.methods.direct import Direct
from tandem.methods.dualrag import DualRAG
from tandem.methods.genground import GenGround
from tandem.methods.ircot import IRCoT
from tandem.methods.iter_retgen import IterRetGen
from tandem.methods.metarag import MetaRAG
from tandem.methods.naive_rag import NaiveRAG
from tandem.methods.oracle import Oracle
from tandem.methods.settings import (
    SETTINGS,
    CoopRAGSettings,
    DualRAGSettings,
    GenGroundSettings,
    IRCoTSettings,
    IterRetGenSettings,
    MetaRAGSettings,
    NaiveRAGSettings,
    R2AGSettings,
    RerankSettings,
)
from tandem.rerank.base import Reranker
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
    """``none`` -> None; ``cross_encoder`` -> CrossEncoderReranker(reranker_model, min_score) (raw logits);
    ``bi_encoder`` -> cosine with the index's encoder (document vectors read from the store's exact rows
    without a copy: a flat index or IVF-PQ's re-scoring file; else encoded on the fly); on an index
    without an encoder, ``reranker_model`` or the embedded MiniLM."""
    from tandem.index.encoder import load_encoder
    from tandem.models import DEFAULT_ENCODER
    from tandem.rerank import BiEncoderReranker, CrossEncoderReranker

    if s.reranker == "none":
        return None
    if s.reranker == "cross_encoder":
        if not s.reranker_model:
            raise ConfigError("reranker=cross_encoder needs reranker_model=PATH_OR_HUB_NAME (e.g. BAAI/bge-reranker-v2-m3)")
        return CrossEncoderReranker(s.reranker_model, store, min_score=s.min_score)
    if index is None or index.manifest.encoder is None or s.reranker_model is not None:
        return BiEncoderReranker(load_encoder(s.reranker_model or DEFAULT_ENCODER), store)
    return BiEncoderReranker(index.encoder, store, index.faiss.exact_rows() if index.has("dense") else None)


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


def _read(parts: Parts, method: str, s: RerankSettings, search: Search | None = None, *,
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


def _load_role_llms(llm: LLM, specs: Mapping[str, str]) -> dict[str, LLM]:
    from tandem.llm.registry import load_llm

    return {role: llm if spec == llm.spec else load_llm(spec) for role, spec in specs.items()}


def _dense_search(parts: Parts, search: Search) -> Search:
    """The index's dense part as the search (DualRAG's keywords, CoopRAG's first stage), when it has one."""
    from tandem.retrieve.dense import DenseRetriever

    if parts.index is None or not parts.index.has("dense") or search.retriever.name == "dense":
        return search
    return Search(DenseRetriever(parts.index), search.store)


def _naive_rag(parts: Parts, s: NaiveRAGSettings) -> Method:
    search, reranker = _read(parts, "naive_rag", s)
    return NaiveRAG(parts.llm, search, s, reranker=reranker)


def _ircot(parts: Parts, s: IRCoTSettings) -> Method:
    search, reranker = _read(parts, "ircot", s)
    return IRCoT(parts.llm, search, s, reranker=reranker)


def _iter_retgen(parts: Parts, s: IterRetGenSettings) -> Method:
    search, reranker = _read(parts, "iter_retgen", s)
    return IterRetGen(parts.llm, search, s, reranker=reranker)


def _genground(parts: Parts, s: GenGroundSettings) -> Method:
    search, reranker = _read(parts, "genground", s)
    return GenGround(parts.llm, search, s, reranker=reranker)


def _metarag(parts: Parts, s: MetaRAGSettings) -> Method:
    """MetaRAG's monitor compares answers with ``monitor_encoder``, else the index's encoder, else the embedded
    MiniLM; it is loaded on the monitor's first use."""
    from tandem.index.encoder import Encoder, load_encoder
    from tandem.models import DEFAULT_ENCODER

    search, reranker = _read(parts, "metarag", s)
    index = parts.index

    def encoder() -> Encoder:
        if s.monitor_encoder is None and index is not None and index.manifest.encoder is not None:
            return index.encoder
        return load_encoder(s.monitor_encoder or DEFAULT_ENCODER)

    return MetaRAG(parts.llm, search, s, reranker=reranker, encoder=encoder)


def _dualrag(parts: Parts, s: DualRAGSettings) -> Method:
    search = parts.need_search("dualrag")
    if s.keyword_retriever == "dense" and s.first_stage == "index":
        search = _dense_search(parts, search)
    search, reranker = _read(parts, "dualrag", s, search, same_query=False)  # keywords retrieve, the entity reranks
    return DualRAG(parts.llm, search, s, reranker=reranker, role_llms=_load_role_llms(parts.llm, s.role_llms))


def _cooprag(parts: Parts, s: CoopRAGSettings) -> Method:
    """RaLa from the index's stored features (``--extras rala``) or computed at query time; the first stage
    is the index's dense part (sharing RaLa's forward pass) unless ``first_stage="index"``."""
    from tandem.rerank.rala import SharedDenseRetriever, open_rala

    search = parts.need_search("cooprag")
    index = parts.index
    rala = None
    if s.reranker == "rala":
        if index is None:
            raise ConfigError("RaLa needs the index behind the retriever: build the method with its index")
        rala = open_rala(index, encoder=s.encoder, layers=tuple(s.layers), cls=s.cls, omega=s.omega,
                         variant=s.variant, fuse=s.fuse)
    if s.first_stage == "dense":
        if index is None or not index.has("dense"):
            raise ConfigError("CoopRAG's first stage is dense: give a dense or hybrid index, or set first_stage=index")
        if rala is not None and SharedDenseRetriever.compatible(index, rala.encoder):
            search = Search(SharedDenseRetriever(index, rala), search.store)
        else:
            search = _dense_search(parts, search)
    return CoopRAG(parts.llm, search, rala, s)


def _r2ag(parts: Parts, s: R2AGSettings) -> Method:
    """R²AG from a checkpoint folder (``r2former``): its R²-Former, its LoRA adapter if any, its encoder."""
    from pathlib import Path

    from tandem.index.encoder import load_encoder
    from tandem.methods.r2ag import R2AG, apply_lora, embedding_backend
    from tandem.train.r2former import LORA_DIR, load_r2former

    if not s.r2former:
        raise ConfigError("r2ag needs a trained R²-Former: --r2former PATH (make one with `tandem train r2ag`)")
    model = load_r2former(s.r2former)
    backend = embedding_backend(parts.llm, s.embeddings_from)
    if (Path(s.r2former) / LORA_DIR).is_dir():
        apply_lora(backend, Path(s.r2former) / LORA_DIR)
    return R2AG(backend, model, load_encoder(s.encoder or model.config.encoder), s, search=parts.search,
                store=parts.store)


# name -> builder(parts, validated settings); settings models in tandem.methods.settings.SETTINGS
METHODS: dict[str, Callable[[Parts, Any], Method]] = {
    "direct": lambda parts, s: Direct(parts.llm, s),
    "naive_rag": _naive_rag,
    "oracle": lambda parts, s: Oracle(parts.llm, parts.need_store("oracle"), s),
    "ircot": _ircot,
    "dualrag": _dualrag,
    "cooprag": _cooprag,
    "r2ag": _r2ag,
    "iter_retgen": _iter_retgen,
    "genground": _genground,
    "metarag": _metarag,
}
NEEDS_INDEX = {"naive_rag", "ircot", "dualrag", "cooprag", "r2ag", "iter_retgen", "genground", "metarag"}


def method_settings_model(name: str) -> type[Settings]:
    """Method ``name``'s settings model; an unknown name is a ConfigError listing the methods."""
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; choose one of {sorted(METHODS)}")
    return SETTINGS[name]


def describe_settings(name: str) -> dict[str, dict[str, Any]]:
    """Method ``name``'s settings: each one's ``type``, ``default`` and ``doc``."""
    return method_settings_model(name).describe()


def method_settings(name: str) -> dict[str, Any]:
    """Method ``name``'s settings with their defaults."""
    return {k: v["default"] for k, v in describe_settings(name).items()}


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
    model = method_settings_model(name)
    given = settings.to_dict() if isinstance(settings, Settings) else dict(settings or {})
    validated = model.from_dict({**given, **more}, where=f"{name} settings")
    if index is None and search is not None:
        index = index_behind(search.retriever)
    parts = Parts(llm, index, search, store if store is not None else search.store if search else None)
    method = METHODS[name](parts, validated)
    if parts.notes:
        method.build_notes = parts.notes  # type: ignore[attr-defined] - read by the CLI into the run's config
    return method


def build_runnable(method: str, llm: LLM, index: Index | None = None, settings: Mapping[str, Any] | None = None,
                   passages: Sequence[Document] | None = None,
                   retriever: RetrieverConfig | None = None) -> tuple[Method, DocStore | None]:
    """The method ``method`` over ``index`` searched with ``retriever`` (default: the index's own kind), or,
    without an index, over a store of ``passages`` for methods that read gold passages; returns it with the
    store that resolves its document ids."""
    from tandem.retrieve import open_retriever

    if method in NEEDS_INDEX and index is None:
        raise ConfigError(f"method {method!r} retrieves: it needs an index")
    search = store = None
    if index is not None:
        ret = retriever or RetrieverConfig()
        search = Search(open_retriever(index, ret.kind, **ret.options(index.kind)), index.store)
        store = index.store
    if store is None and passages:
        store = DocStore(list(passages))
    return build_method(method, llm, search, store, index=index, settings=settings), store


__all__ = ["METHODS", "NEEDS_INDEX", "Parts", "build_method", "build_reranker", "build_runnable",
           "describe_settings", "method_settings", "method_settings_model"]
