"""Shared fixtures: paths to ../shared/data and small in-memory corpora."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.types import Document

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def shared(rel: str) -> Path:
    """A file of ../shared/data; skips the test if the folder is absent (it is present in CI)."""
    path = SHARED_DATA / rel
    if not path.exists():
        pytest.skip(f"{path} not available")
    return path


@pytest.fixture
def small_docs() -> list[Document]:
    texts = {
        "d1": ("Marie Curie", "Marie Curie was born in Warsaw and won two Nobel Prizes."),
        "d2": ("Pierre Curie", "Pierre Curie was a French physicist born in Paris."),
        "d3": ("Warsaw", "Warsaw is the capital of Poland on the Vistula river."),
        "d4": ("Vistula", "The Vistula is the longest river in Poland."),
        "d5": ("Paris", "Paris is the capital of France on the Seine."),
    }
    return [Document(i, t, x) for i, (t, x) in texts.items()]
