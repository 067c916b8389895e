"""Direct's settings (``--set KEY=VALUE``; the table in docs/methods is written from this model)."""

from __future__ import annotations

from pydantic import Field

from tandem.methods.settings import temperature_setting
from tandem.settings import Settings


class DirectSettings(Settings):
    """Direct: closed-book, one call with the brevity prompt (docs/methods/baselines.md)."""

    temperature: float = temperature_setting()
    max_tokens: int = Field(32, ge=1, description="answer tokens")
