"""Retrievers over index folders, behind one protocol, each an entry of :data:`tandem.registry.RETRIEVERS`
with its settings model, registered in its own module (``sparse``, ``dense``, ``hybrid``, ``graph``);
``open_retriever`` (:mod:`tandem.retrieve.opener`) picks by name (default: the index's kind) and validates the
options against that model (an unknown or bad option is a ConfigError naming the valid ones)."""

from __future__ import annotations

from tandem.retrieve.base import Retriever
from tandem.retrieve.dense import DenseRetriever  # each module registers its retriever where it is defined
from tandem.retrieve.graph import GraphRetriever, GraphSettings, GraphStageSettings
from tandem.retrieve.hybrid import HybridRetriever, HybridSettings
from tandem.retrieve.opener import best_retriever, open_retriever
from tandem.retrieve.sparse import BM25Retriever

__all__ = ["BM25Retriever", "DenseRetriever", "GraphRetriever", "GraphSettings", "GraphStageSettings",
           "HybridRetriever", "HybridSettings", "Retriever", "best_retriever", "open_retriever"]
