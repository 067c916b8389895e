"""R2AG's settings (``--set KEY=VALUE``; the table in docs/methods is written from this model)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from tandem.settings import SERVER_ONLY, Settings


class R2AGSettings(Settings):
    """R²AG (docs/methods/r2ag.md): retrieval features -> R²-Former -> vectors in the LLM's input."""

    #: ``--preset paper``: docs/methods/baselines.md, "The paper preset"
    presets: ClassVar[dict[str, dict[str, dict[str, Any]]]] = {"paper": {"settings": {"docs": "retrieve", "k": 10}, "run": {"reanswer": False}}}

    r2former: str | None = Field(None, description="checkpoint folder from `tandem train r2ag` (required)", json_schema_extra=SERVER_ONLY)
    k: int = Field(10, ge=1, description="documents per list")
    docs: Literal["retrieve", "context"] = Field("retrieve", description="retrieve: top-k from the index; context: "
                                                                         "the question's own paragraphs")
    encoder: str | None = Field(None, description="retriever embeddings for the features (default: the checkpoint's)", json_schema_extra=SERVER_ONLY)
    embeddings_from: str | None = Field(None, description="for an openai LLM: the served model's HF folder", json_schema_extra=SERVER_ONLY)
    max_tokens: int = Field(32, ge=1, description="new tokens")
    inject: bool = Field(True, description="false keeps the placeholders' own embeddings (a control)")
    placeholder: str | None = Field(None, description="placeholder token (default: the checkpoint's)", json_schema_extra=SERVER_ONLY)
    template: str | None = Field(None, description="prompt wrapper (default: the checkpoint's)", json_schema_extra=SERVER_ONLY)
    doc_words: int | None = Field(None, ge=0, description="words kept per document (default: the checkpoint's; 0: whole)")
