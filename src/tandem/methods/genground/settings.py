"""GenGround's settings (``--set KEY=VALUE``; the table in docs/methods is written from this model)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from tandem.methods.settings import Reranker, RerankSettings, reranker_setting, temperature_setting
from tandem.settings import SERVER_ONLY


class GenGroundSettings(RerankSettings):
    """GenGround (docs/methods/baselines.md): generate a sub-question and its answer, then ground the answer in
    retrieved documents, batch by batch."""

    #: ``--preset paper``: docs/methods/baselines.md, "The paper preset"
    presets: ClassVar[dict[str, dict[str, dict[str, Any]]]] = {"paper": {"settings": {"reranker": "bi_encoder", "first_stage": "bm25", "candidates": 50, "k": 10}}}

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
