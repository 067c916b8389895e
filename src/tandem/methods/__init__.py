"""QA methods, one file each, behind the ``Method`` protocol. Their settings models are in
:mod:`tandem.methods.settings`; each method file ends with its entry in :data:`tandem.registry.METHODS`, and
:mod:`tandem.compose` builds them (``build_method``, re-exported here for convenience)."""

from __future__ import annotations

from typing import Any

from tandem.methods.base import Method, Search


def __getattr__(name: str) -> Any:
    """``build_method`` lives in :mod:`tandem.compose` (imported on first use)."""
    if name == "build_method":
        from tandem.compose import build_method

        return build_method
    raise AttributeError(f"module 'tandem.methods' has no attribute {name!r}")


__all__ = ["Method", "Search", "build_method"]
