"""QA methods, one file each, behind the ``Method`` protocol. Their settings are in
:mod:`tandem.methods.settings`; :mod:`tandem.compose` builds them (``build_method`` and the ``METHODS``
registry are re-exported here)."""

from __future__ import annotations

from typing import Any

from tandem.methods.base import Method, Search

_FROM_COMPOSE = ("METHODS", "NEEDS_INDEX", "build_method", "describe_settings", "method_settings")


def __getattr__(name: str) -> Any:
    """The registry and builders live in :mod:`tandem.compose` (imported on first use: no import cycle)."""
    if name in _FROM_COMPOSE:
        from tandem import compose

        return getattr(compose, name)
    raise AttributeError(f"module 'tandem.methods' has no attribute {name!r}")


__all__ = ["METHODS", "NEEDS_INDEX", "Method", "Search", "build_method", "describe_settings", "method_settings"]
