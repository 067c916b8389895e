"""MetaRAG's settings (``--set KEY=VALUE``; the table in docs/methods is written from this model)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from tandem.methods.settings import ReadSettings, Reranker, reranker_setting, temperature_setting
from tandem.settings import SERVER_ONLY


class MetaRAGSettings(ReadSettings):
    """MetaRAG (docs/methods/baselines.md): answer, monitor, and on doubt a critic that diagnoses and suggests."""

    #: ``--preset paper``: docs/methods/baselines.md, "The paper preset"
    presets: ClassVar[dict[str, dict[str, dict[str, Any]]]] = {"paper": {"settings": {"reranker": "bi_encoder", "first_stage": "bm25", "candidates": 50, "k": 10}}}

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
