"""tandem: retrieval-augmented multi-hop question answering where retriever and LLM cooperate.

The public API (:mod:`tandem.api`): ``index_documents``, ``open_index``, ``load_method``, ``ask``,
``as_documents``; imported on first use, so ``import tandem`` stays light."""

from typing import Any

from tandem.version import __version__

_API = ("as_documents", "ask", "index_documents", "load_method", "open_index")


def __getattr__(name: str) -> Any:
    if name in _API:
        from tandem import api

        return getattr(api, name)
    raise AttributeError(f"module 'tandem' has no attribute {name!r}")


__all__ = ["__version__", *_API]
