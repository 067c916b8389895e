"""Oracle's settings (``--set KEY=VALUE``; the table in docs/methods is written from this model)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tandem.methods.settings import temperature_setting
from tandem.settings import Settings


class OracleSettings(Settings):
    """Oracle: the NativeRAG reader fed the gold evidence."""

    mode: Literal["sentence", "paragraph"] = Field("sentence", description="gold supporting sentences where the "
                                                                           "dataset has them, or whole paragraphs")
    temperature: float = temperature_setting()
    max_tokens: int = Field(32, ge=1, description="answer tokens")
