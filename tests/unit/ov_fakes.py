"""A fake of OpenVINO GenAI's request handle, for the engine worker's unit tests (no model)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class CountdownHandle:
    """A request that runs through one engine step and has finished at the next, with ``outputs`` (what
    ``read_all`` gives: objects with ``generated_ids``, and ``score`` for beams); nothing to read step by step."""

    def __init__(self, outputs: list[Any]) -> None:
        self.outputs, self.left = outputs, 2

    def can_read(self) -> bool:
        return False

    def get_status(self) -> Any:
        self.left -= 1
        return SimpleNamespace(name="RUNNING" if self.left > 0 else "FINISHED")

    def read_all(self) -> list[Any]:
        return self.outputs
