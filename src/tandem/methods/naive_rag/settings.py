"""NaiveRAG's settings (``--set KEY=VALUE``; the table in docs/methods is written from this model)."""

from __future__ import annotations

from pydantic import Field

from tandem.methods.settings import ReadSettings, temperature_setting


class NaiveRAGSettings(ReadSettings):
    """NativeRAG: retrieve with the question, optionally rerank ``candidates``, answer from the top ``k``."""

    temperature: float = temperature_setting()
    max_tokens: int = Field(32, ge=1, description="answer tokens")
