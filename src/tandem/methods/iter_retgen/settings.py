"""IterRetGen's settings (``--set KEY=VALUE``; the table in docs/methods is written from this model)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from tandem.methods.settings import ReadSettings, temperature_setting


class IterRetGenSettings(ReadSettings):
    """Iter-RetGen (docs/methods/baselines.md): retrieve with the question plus the previous generation, generate,
    ``iterations`` times."""

    #: ``--preset paper``: docs/methods/baselines.md, "The paper preset"
    presets: ClassVar[dict[str, dict[str, dict[str, Any]]]] = {"paper": {"settings": {"reranker": "bi_encoder", "first_stage": "bm25", "candidates": 50, "k": 10}}}

    iterations: int = Field(3, ge=1, description="retrieval-generation rounds (FlashRAG's runs: 3)")
    temperature: float = temperature_setting()
    max_tokens: int = Field(256, ge=1, description="tokens per generation (a chain of thought ending in the answer)")
