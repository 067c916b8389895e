"""tandem: retrieval-augmented multi-hop question answering where retriever and LLM cooperate.

The public API (:mod:`tandem.api`): ``index_documents``, ``open_index``, ``load_method``, ``ask``,
``as_documents``, and ``evaluate`` (:mod:`tandem.eval.run`, what ``tandem eval qa`` runs); imported on first use, so ``import tandem`` stays light."""

from typing import Any

from tandem.version import __version__

_API = ("as_documents", "ask", "index_documents", "load_method", "open_index")
_RUN = ("evaluate",)


def __getattr__(name: str) -> Any:
    if name in _API:
        from tandem import api

        return getattr(api, name)
    if name in _RUN:
        from tandem.eval import run

        return getattr(run, name)
    raise AttributeError(f"module 'tandem' has no attribute {name!r}")


__all__ = ["__version__", *_API, *_RUN]
