"""Vectors as the stores take them, and rows as they give them back."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from tandem.errors import ConfigError


def as_f32(vectors: np.ndarray, dim: int, what: str) -> np.ndarray:
    """``vectors`` as a C-contiguous float32 (n, ``dim``) array; a ConfigError naming ``what`` for another shape."""
    array = np.ascontiguousarray(vectors, dtype=np.float32)
    if array.ndim != 2 or array.shape[1] != dim:
        raise ConfigError(f"{what}: expected vectors of shape (n, {dim}), got {array.shape}")
    return array


class Rows(Protocol):
    """Float rows read by an array of row numbers (``rows[array] -> (len(array), dim)``)."""

    def __len__(self) -> int: ...

    def __getitem__(self, key: Any) -> np.ndarray: ...
