"""Direct's settings (``--set KEY=VALUE``; the table in docs/methods is written from this model)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from tandem.methods.settings import temperature_setting
from tandem.settings import Settings


class DirectSettings(Settings):
    """Direct: closed-book, one call with the brevity prompt (docs/methods/baselines.md)."""

    #: ``--preset paper``: docs/methods/baselines.md, "The paper preset"
    presets: ClassVar[dict[str, dict[str, dict[str, Any]]]] = {"paper": {"settings": {"temperature": 0.0}, "run": {"reanswer": False}}}

    temperature: float = temperature_setting()
    max_tokens: int = Field(32, ge=1, description="answer tokens")
