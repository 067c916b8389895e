"""IRCoT's settings (``--set KEY=VALUE``; the table in docs/methods is written from this model)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from tandem.methods.settings import ReadSettings, temperature_setting


class IRCoTSettings(ReadSettings):
    """IRCoT: one chain-of-thought sentence per step, each retrieved with, until "So the answer is:"."""

    #: ``--preset paper``: docs/methods/baselines.md, "The paper preset"
    presets: ClassVar[dict[str, dict[str, dict[str, Any]]]] = {"paper": {"settings": {"reranker": "bi_encoder", "first_stage": "bm25", "candidates": 50, "k": 10, "temperature": 0.3}}}

    max_steps: int = Field(5, ge=1, description="reasoning steps at most")
    policy: Literal["replace", "accumulate"] = Field("replace", description="replace: each step reads its own "
                                                                            "hits (DualRAG's IRCoT); accumulate: "
                                                                            "all hits so far (FlashRAG's)")
    temperature: float = temperature_setting()
    max_tokens: int = Field(64, ge=1, description="tokens per thought")
