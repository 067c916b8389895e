"""What methods' settings share: the reranker and temperature settings and the bases of methods that retrieve and
rerank (``RerankSettings``) or also read a top-k (``ReadSettings``). Each method's own settings model lives in its
folder (``tandem/methods/<name>/settings.py``: ``--set KEY=VALUE``, a config file's ``settings:``).

A method's algorithm reads the hyper-parameters; the component choices (``reranker``,
``keyword_retriever``, ``first_stage``, RaLa's options, ``r2former``, ...) are read by the composition
layer (:mod:`tandem.compose`), which hands the method ready components. Sources and the paper's values:
docs/methods/*.md."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from tandem.settings import SERVER_ONLY, Settings

Reranker = Literal["bi_encoder", "cross_encoder", "none"]


def reranker_setting(default: str, cross_and_none: str) -> Any:
    """The ``reranker`` setting: ``default``, and what cross_encoder and none mean for the method."""
    return Field(default, description="bi_encoder: cosine with the index's encoder (offline); cross_encoder: needs "
                                      + cross_and_none, json_schema_extra=SERVER_ONLY)


def temperature_setting() -> float:
    return Field(0.0, ge=0.0, le=2.0, description="sampling temperature of every call (0 = greedy)")


class RerankSettings(Settings):
    """The reranker a method's retrieved list goes through (built by :func:`tandem.methods.parts.build_reranker`)."""

    reranker: Reranker = reranker_setting("none", "reranker_model; none: retrieval order")
    reranker_model: str | None = Field(None, description="the cross-encoder (local folder or hub name, e.g. "
                                                         "BAAI/bge-reranker-v2-m3); for bi_encoder, another encoder", json_schema_extra=SERVER_ONLY)
    min_score: float | None = Field(0.0, description="cross_encoder only: keep raw logits > min_score; null keeps all", json_schema_extra=SERVER_ONLY)
    first_stage: Literal["index", "bm25", "dense", "hybrid"] = Field(
        "index", description="where the candidates come from: index = the run's retriever; bm25 / dense / hybrid = "
                             "that part of the index. A bi_encoder over a dense first stage with the same encoder "
                             "reorders nothing: such a run is told so and skips the reranker", json_schema_extra=SERVER_ONLY)


class ReadSettings(RerankSettings):
    """The retrieval every question-reading method shares: ``candidates`` from the first stage, reranked (when a
    reranker is set) to the ``k`` documents the LLM reads (:func:`tandem.methods.base.search_reranked`)."""

    k: int = Field(5, ge=1, description="documents the LLM reads per retrieval")
    candidates: int = Field(50, ge=1, description="first-stage depth when a reranker is set")
