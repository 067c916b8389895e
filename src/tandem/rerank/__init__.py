"""Rerankers behind one protocol: bi-encoder cosine (offline default), cross-encoder (any local model)."""

from tandem.rerank.base import Reranker, ranked
from tandem.rerank.bi_encoder import BiEncoderReranker
from tandem.rerank.cross_encoder import CrossEncoderReranker

__all__ = ["BiEncoderReranker", "CrossEncoderReranker", "Reranker", "ranked"]
