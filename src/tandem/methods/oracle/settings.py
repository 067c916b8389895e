"""Oracle's settings (``--set KEY=VALUE``; the table in docs/methods is written from this model)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from tandem.methods.settings import temperature_setting
from tandem.settings import Settings


class OracleSettings(Settings):
    """Oracle: the NativeRAG reader fed the gold evidence."""

    #: ``--preset paper``: docs/methods/baselines.md, "The paper preset"
    presets: ClassVar[dict[str, dict[str, dict[str, Any]]]] = {"paper": {"settings": {}, "run": {"reanswer": False}}}

    mode: Literal["sentence", "paragraph"] = Field("sentence", description="gold supporting sentences where the "
                                                                           "dataset has them, or whole paragraphs")
    temperature: float = temperature_setting()
    max_tokens: int = Field(32, ge=1, description="answer tokens")
