"""Deterministic stand-in encoders for tests of the index machinery (not for retrieval quality)."""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Sequence

import numpy as np


class HashingEncoder:
    """Bag-of-words hashed into ``dim`` buckets, L2-normalised: same words, similar vectors."""

    pooling = "hashing"
    backend = "hashing"

    def __init__(self, name: str = "hashing", dim: int = 64, delay_per_text: float = 0.0) -> None:
        self.name, self.dim, self.delay_per_text = name, dim, delay_per_text

    def encode(self, texts: Sequence[str], *, batch_size: int = 64,
               on_progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            if self.delay_per_text:
                time.sleep(self.delay_per_text)
            for word in re.findall(r"\w+", text.lower()):
                bucket = int.from_bytes(hashlib.md5(word.encode()).digest()[:4], "little") % self.dim
                out[i, bucket] += 1.0
            if on_progress is not None and ((i + 1) % max(1, batch_size) == 0 or i + 1 == len(texts)):
                on_progress(i + 1, len(texts))
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)
