"""Rerankers behind one protocol: bi-encoder cosine (offline default), cross-encoder (any local model),
RaLa (CoopRAG's layer contrast)."""

from tandem.rerank.base import Reranker, ranked
from tandem.rerank.bi_encoder import BiEncoderReranker
from tandem.rerank.cross_encoder import CrossEncoderReranker
from tandem.rerank.rala import RaLaReranker, open_rala

__all__ = ["BiEncoderReranker", "CrossEncoderReranker", "RaLaReranker", "Reranker", "open_rala", "ranked"]
