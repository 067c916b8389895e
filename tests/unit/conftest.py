"""Fixtures unit tests share: a small BM25 index (the HTTP API, MCP, plugin and contract tests)."""

from __future__ import annotations

import pytest

from tandem.index import build_index


@pytest.fixture
def index_dir(tmp_path, small_docs):
    """A BM25 index over the small documents (tests/conftest.py), in the test's folder."""
    build_index(small_docs, tmp_path / "demo", kind="bm25")
    return tmp_path / "demo"
