"""CoopRAG's settings (``--set KEY=VALUE``; the table in docs/methods is written from this model)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from tandem.methods.settings import temperature_setting
from tandem.settings import SERVER_ONLY, Settings


class CoopRAGSettings(Settings):
    """CoopRAG (docs/methods/cooprag.md): unroll, retrieve with U, RaLa rerank, complete, answer."""

    #: ``--preset paper``: docs/methods/baselines.md, "The paper preset"
    presets: ClassVar[dict[str, dict[str, dict[str, Any]]]] = {"paper": {"settings": {"fuse": "none", "layers": [0, 2, 4], "cls": "cls", "variant": "eq4"}, "run": {"reanswer": False}}}

    renamed: ClassVar[dict[str, str]] = {"n": "candidates"}
    at_most: ClassVar[tuple[tuple[str, str], ...]] = (("k", "candidates"),)

    candidates: int = Field(100, ge=1, description="first-stage depth (the paper's n)", json_schema_extra=SERVER_ONLY)
    k: int = Field(5, ge=1, description="documents kept after reranking")
    query: Literal["q", "q+s", "q+r", "q+s+r"] = Field("q+s+r", description="parts of U (paper Table 16)")
    masks: Literal["drop", "keep"] = Field("drop", description="drop: mask tokens left out of U; keep: literal")
    one_call: bool = Field(False, description="completion + answer in one call (paper Table 18)")
    shared_context: bool = Field(False, description="completion and answer under one system message that "
                                                    "holds both instructions, so the answer's prompt begins "
                                                    "as the completion's did and the engine's prefix cache "
                                                    "serves its documents (false: the authors' two system "
                                                    "prompts)")
    unroll_attempts: int = Field(3, ge=1, description="unrolling tries (the authors: 5)")
    complete_attempts: int = Field(3, ge=1, description="completion tries (the authors: 3)")
    temperature: float = temperature_setting()
    retry_temperature: float = Field(0.7, ge=0.0, le=2.0, description="retries sample at this temperature, seed = "
                                                                      "attempt")
    max_tokens: dict[str, int] = Field(default_factory=dict, description="per-role budgets: unroll, complete, "
                                                                         "one_call, answer", json_schema_extra=SERVER_ONLY)
    send_schema: bool = Field(True, description="send the JSON roles' bounded schemas (false = prompt-only)")
    reranker: Literal["rala", "none"] = Field("rala", description="rala: layer-contrast reranking; none: first-stage "
                                                                 "top-k", json_schema_extra=SERVER_ONLY)
    first_stage: Literal["dense", "index"] = Field("dense", description="dense: the index's dense part (the paper); "
                                                                        "index: its own retriever; a --retriever "
                                                                        "other than the index's kind (graph, bm25 on "
                                                                        "a hybrid index) is searched either way", json_schema_extra=SERVER_ONLY)
    encoder: str | None = Field(None, description="RaLa's model when it differs from the index's", json_schema_extra=SERVER_ONLY)
    layers: list[int] = Field([3], min_length=1, description="RaLa's early layers C", json_schema_extra=SERVER_ONLY)
    cls: Literal["mean", "cls"] = Field("mean", description="sentence vector per layer: mean pooling or [CLS]", json_schema_extra=SERVER_ONLY)
    omega: bool = Field(True, description="weight token terms by ω", json_schema_extra=SERVER_ONLY)
    variant: Literal["eq4", "eq3"] = Field("eq4", description="RaLa's scoring equation", json_schema_extra=SERVER_ONLY)
    fuse: Literal["rrf", "none"] = Field("rrf", description="fuse RaLa with the first stage by RRF", json_schema_extra=SERVER_ONLY)
