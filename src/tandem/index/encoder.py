"""Text encoders for dense retrieval: L2-normalised float32 vectors from a sentence-transformers model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from tandem.models import DEFAULT_ENCODER, canonical_name, offline_env, resolve_model


@runtime_checkable
class Encoder(Protocol):
    """Maps texts to L2-normalised float32 vectors of shape (n, dim)."""

    name: str
    dim: int
    pooling: str

    def encode(self, texts: Sequence[str], *, batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        """Encode texts; rows are unit-norm float32."""
        ...


class SentenceTransformerEncoder:
    """sentence-transformers' own ``encode()``: the reference every faster encoder is checked against."""

    def __init__(self, name: str = DEFAULT_ENCODER, device: str = "cpu", max_seq_length: int | None = None) -> None:
        offline_env()
        from sentence_transformers import SentenceTransformer

        self.name = canonical_name(name)
        self.model = SentenceTransformer(resolve_model(name), device=device)
        if max_seq_length is not None:
            self.model.max_seq_length = max_seq_length
        self.dim = int(self.model.get_embedding_dimension())
        self.pooling = _pooling_mode(self.model)

    def encode(self, texts: Sequence[str], *, batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        vecs = self.model.encode(
            list(texts),
            batch_size=batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=show_progress,
        )
        return np.ascontiguousarray(vecs, dtype=np.float32)


def _pooling_mode(model: object) -> str:
    for module in model:  # type: ignore[attr-defined]
        mode = getattr(module, "pooling_mode", None)
        if mode is not None:
            return str(mode)
    return "unknown"


ENCODERS: dict[str, type] = {"st": SentenceTransformerEncoder}


def load_encoder(name: str = DEFAULT_ENCODER, backend: str = "st") -> Encoder:
    """Build an encoder by model name/path and backend (see ``ENCODERS``)."""
    from tandem.errors import ConfigError

    if backend not in ENCODERS:
        raise ConfigError(f"unknown encoder backend {backend!r}; choose one of {sorted(ENCODERS)}")
    return ENCODERS[backend](name)
