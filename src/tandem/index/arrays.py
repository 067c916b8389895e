"""Vectors as the stores take them, rows as they give them back (in memory or read from a raw file on demand),
and the exact re-scoring of candidate rows."""

from __future__ import annotations

import os
import weakref
from pathlib import Path
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


class RowFile:
    """Float32 rows of a raw file, read on demand with ``pread`` (``rows[array]``, ``rows[a:b]``).

    Re-scoring reads ~100 scattered rows a query. A memory map would make every page it touches, and
    the kernel's fault-around neighbours already cached, part of this process's resident set until the
    whole file is (1.5 GB at 1M x 384, measured); reads leave the file to the page cache alone.
    """

    def __init__(self, path: Path, n: int, dim: int) -> None:
        self.path, self.n, self.dim, self.row_bytes = path, n, dim, dim * 4
        self._fd = os.open(path, os.O_RDONLY)
        weakref.finalize(self, os.close, self._fd)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: slice | np.ndarray) -> np.ndarray:
        if isinstance(key, slice):
            start, stop, _ = key.indices(self.n)
            data = os.pread(self._fd, max(0, stop - start) * self.row_bytes, start * self.row_bytes)
            return np.frombuffer(data, np.float32).reshape(-1, self.dim)
        rows = np.asarray(key, np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= self.n):
            raise IndexError(f"row out of range 0..{self.n - 1} in {self.path}")
        out = np.empty((len(rows), self.dim), np.float32)
        for i, row in enumerate(rows):
            out[i] = np.frombuffer(os.pread(self._fd, self.row_bytes, int(row) * self.row_bytes), np.float32)
        return out


def rescore(queries: np.ndarray, candidates: np.ndarray, rows: np.ndarray | RowFile, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` among each query's candidate rows (-1 = none), reading the rows from ``rows``
    (an array or a :class:`RowFile`; rows are read in file order)."""
    scores = np.full((len(queries), k), -np.inf, np.float32)
    best = np.full((len(queries), k), -1, np.int64)
    for qi, (query, cand) in enumerate(zip(queries, candidates, strict=True)):
        cand = np.unique(cand[cand >= 0])
        if not len(cand):
            continue
        exact = np.asarray(rows[cand], dtype=np.float32) @ query
        top = np.argsort(-exact, kind="stable")[:k]
        scores[qi, :len(top)], best[qi, :len(top)] = exact[top], cand[top]
    return scores, best
