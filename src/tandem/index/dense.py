"""Dense vector index files with FAISS: exact inner product by default, IVF or HNSW as options.

Vectors are L2-normalised, so inner product is cosine similarity.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from tandem.errors import ConfigError

DENSE_FILE = "dense.faiss"
DEFAULT_DENSE = {"faiss": "flat", "nlist": None, "nprobe": 16, "hnsw_m": 32, "ef_search": 128}
FAISS_KINDS = ("flat", "ivf", "hnsw")

# faiss skips BLAS below 128,000 query x doc pairs by default; batched searches are ~10x faster with BLAS.
faiss.cvar.distance_compute_blas_threshold = 20


def build_faiss(vectors: np.ndarray, params: dict[str, Any]) -> faiss.Index:
    """A FAISS index over ``vectors`` (n, dim) float32 as ``params['faiss']`` says."""
    n, dim = vectors.shape
    kind = params["faiss"]
    if kind == "flat":
        index: faiss.Index = faiss.IndexFlatIP(dim)
    elif kind == "ivf":
        nlist = ivf_nlist(n, params)
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors)
        index.nprobe = min(params["nprobe"], nlist)
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, params["hnsw_m"], faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efSearch = params["ef_search"]
    else:
        raise ConfigError(f"unknown faiss index kind {kind!r}; choose one of {sorted(FAISS_KINDS)}")
    index.add(vectors)
    return index


def ivf_nlist(n: int, params: dict[str, Any]) -> int:
    """The IVF list count for ``n`` vectors: ``params['nlist']``, else about 4 sqrt(n) (>= 39 vectors a list)."""
    return int(params.get("nlist") or max(1, min(int(4 * math.sqrt(n)), n // 39 or 1)))


def save_faiss(index: faiss.Index, folder: Path) -> None:
    faiss.write_index(index, str(folder / DENSE_FILE))


def load_faiss(folder: Path, params: dict[str, Any]) -> faiss.Index:
    """Read the FAISS index of an index folder and restore its search-time settings."""
    index = faiss.read_index(str(folder / DENSE_FILE))
    if params.get("faiss") == "ivf":
        faiss.extract_index_ivf(index).nprobe = params["nprobe"]
    elif params.get("faiss") == "hnsw":
        index.hnsw.efSearch = params["ef_search"]
    return index
