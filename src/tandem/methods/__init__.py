"""QA methods, one folder each (``tandem/methods/<name>/``: algorithm, prompts, settings, trainer), behind the
``Method`` protocol; what their builders are handed is :mod:`tandem.methods.parts`. The composition layer
above them, :mod:`tandem.compose`, builds them (``build_method``, ``build_run``)."""

from __future__ import annotations

from tandem.methods.base import Method, Search

__all__ = ["Method", "Search"]
