"""Put a runnable method together from its parts: an LLM, an index (or a passage pool) and settings.
The CLI, the HTTP server and Python callers share this one assembly."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tandem.errors import ConfigError
from tandem.index.build import Index
from tandem.index.store import DocStore
from tandem.llm.types import LLM
from tandem.methods import NEEDS_INDEX, Search, build_method
from tandem.methods.base import Method
from tandem.retrieve import open_retriever
from tandem.types import Document


def build_runnable(method: str, llm: LLM, index: Index | None = None, settings: Mapping[str, Any] | None = None,
                   passages: Sequence[Document] | None = None) -> tuple[Method, DocStore | None]:
    """The method ``method`` over ``index`` (or, without one, a store of ``passages`` for methods that
    read gold passages); returns it with the store that resolves its document ids."""
    if method in NEEDS_INDEX and index is None:
        raise ConfigError(f"method {method!r} retrieves: it needs an index")
    search = store = None
    if index is not None:
        search, store = Search(open_retriever(index), index.store), index.store
    if store is None and passages:
        store = DocStore(list(passages))
    return build_method(method, llm, search, store, **dict(settings or {})), store
