"""Each method's settings (``--set KEY=VALUE``, a config file's ``settings:``), typed, with defaults and docs.

A method's algorithm reads the hyper-parameters; the component choices (``reranker``,
``keyword_retriever``, ``first_stage``, RaLa's options, ``r2former``, ...) are read by the composition
layer (:mod:`tandem.compose`), which hands the method ready components. Sources and the paper's values:
docs/methods/*.md."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from tandem.settings import SERVER_ONLY, Settings

Reranker = Literal["bi_encoder", "cross_encoder", "none"]


def reranker_setting(default: str, cross_and_none: str) -> Any:
    """The ``reranker`` setting: ``default``, and what cross_encoder and none mean for the method."""
    return Field(default, description="bi_encoder: cosine with the index's encoder (offline); cross_encoder: needs "
                                      + cross_and_none, json_schema_extra=SERVER_ONLY)


def temperature_setting() -> float:
    return Field(0.0, ge=0.0, le=2.0, description="sampling temperature of every call (0 = greedy)")


class DirectSettings(Settings):
    """Direct: closed-book, one call with the brevity prompt (docs/methods/baselines.md)."""

    temperature: float = temperature_setting()
    max_tokens: int = Field(32, ge=1, description="answer tokens")


class RerankSettings(Settings):
    """The reranker a method's retrieved list goes through (built by :func:`tandem.compose.build_reranker`)."""

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


class NaiveRAGSettings(ReadSettings):
    """NativeRAG: retrieve with the question, optionally rerank ``candidates``, answer from the top ``k``."""

    temperature: float = temperature_setting()
    max_tokens: int = Field(32, ge=1, description="answer tokens")


class OracleSettings(Settings):
    """Oracle: the NativeRAG reader fed the gold evidence."""

    mode: Literal["sentence", "paragraph"] = Field("sentence", description="gold supporting sentences where the "
                                                                           "dataset has them, or whole paragraphs")
    temperature: float = temperature_setting()
    max_tokens: int = Field(32, ge=1, description="answer tokens")


class IRCoTSettings(ReadSettings):
    """IRCoT: one chain-of-thought sentence per step, each retrieved with, until "So the answer is:"."""

    max_steps: int = Field(5, ge=1, description="reasoning steps at most")
    policy: Literal["replace", "accumulate"] = Field("replace", description="replace: each step reads its own "
                                                                            "hits (DualRAG's IRCoT); accumulate: "
                                                                            "all hits so far (FlashRAG's)")
    temperature: float = temperature_setting()
    max_tokens: int = Field(64, ge=1, description="tokens per thought")


class IterRetGenSettings(ReadSettings):
    """Iter-RetGen (docs/methods/baselines.md): retrieve with the question plus the previous generation, generate,
    ``iterations`` times."""

    iterations: int = Field(3, ge=1, description="retrieval-generation rounds (FlashRAG's runs: 3)")
    temperature: float = temperature_setting()
    max_tokens: int = Field(256, ge=1, description="tokens per generation (a chain of thought ending in the answer)")


class GenGroundSettings(RerankSettings):
    """GenGround (docs/methods/baselines.md): generate a sub-question and its answer, then ground the answer in
    retrieved documents, batch by batch."""

    renamed: ClassVar[dict[str, str]] = {"topk": "candidates", "rerank_topk": "k"}
    at_most: ClassVar[tuple[tuple[str, str], ...]] = (("min_iter", "max_iter"),)

    max_iter: int = Field(5, ge=1, description="sub-questions at most (DualRAG's runs: 5)")
    min_iter: int = Field(1, ge=0, description="sub-questions asked and grounded before the plan may finish (the "
                                               "paper's generate step always asks first); 0 = may finish at once", json_schema_extra=SERVER_ONLY)
    candidates: int = Field(50, ge=1, description="first-stage hits per sub-question (DualRAG's runs: 50)")
    k: int = Field(10, ge=1, description="documents kept after reranking (DualRAG's runs: 10)")
    batch: int = Field(3, ge=1, description="documents per grounding call (the authors: 3)")
    reranker: Reranker = reranker_setting("bi_encoder", "reranker_model (DualRAG's runs: bge-reranker-v2-m3); none: first-stage order")
    temperature: float = temperature_setting()
    send_schema: bool = Field(True, description="send the plan role's bounded schema (false = prompt-only)")
    ground_format: Literal["json", "tags"] = Field(
        "json", description="grounding reply: json = {evidence, answer} under a bounded schema (evidence \"Empty\" "
                            "when no document answers); tags = the authors' <ref>...</ref><revise>...</revise> text")
    ground_tokens: int = Field(128, ge=1, description="tokens per grounding reply (tags; json replies are bounded by "
                                                      "their schema)")
    max_tokens: int = Field(32, ge=1, description="final answer tokens")


class MetaRAGSettings(ReadSettings):
    """MetaRAG (docs/methods/baselines.md): answer, monitor, and on doubt a critic that diagnoses and suggests."""

    max_iter: int = Field(5, ge=1, description="generations at most (the authors: 5)")
    candidates: int = Field(100, ge=1, description="first-stage depth (DualRAG's runs: 100)")
    k: int = Field(10, ge=1, description="documents kept after reranking (DualRAG's runs: 10)")
    reranker: Reranker = reranker_setting("bi_encoder", "reranker_model (DualRAG's runs: bge-reranker-v2-m3); none: first-stage order")
    monitor: Literal["pseudo_answer", "off"] = Field(
        "pseudo_answer", description="pseudo_answer: an LLM answers from the documents alone and the answer is "
                                     "accepted when the two are similar (the authors: a T5 expert); off: accept the "
                                     "first answer")
    threshold: float = Field(0.3, ge=-1.0, le=1.0, description="monitor: accept when cosine(answer, pseudo-answer) "
                                                               "exceeds it (the authors: 0.3)")
    monitor_encoder: str | None = Field(None, description="monitor's sentence encoder (default: the index's, else "
                                                          "the embedded MiniLM, the authors' choice)", json_schema_extra=SERVER_ONLY)
    rewrite_chars: int = Field(64, ge=1, description="rewritten queries are cut to this many characters (the "
                                                     "authors: 64)")
    temperature: float = temperature_setting()
    send_schema: bool = Field(True, description="send the generator's bounded schema (false = prompt-only)")
