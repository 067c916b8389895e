"""Dense vector stores behind one protocol: FAISS (flat, IVF, HNSW, IVF-PQ) and Qdrant.

Vectors are L2-normalised, so inner product is cosine similarity. A store is made empty by
:func:`new_store`, trained on a sample (a no-op for the kinds that need none), fed with ``add`` in
batches (a streaming build calls it once per shard), saved into the index folder and opened again
by :func:`open_store` with the parameters the manifest recorded.

- ``flat``: exact inner product, all vectors in RAM (the default; results unchanged).
- ``ivf`` / ``hnsw``: FAISS IVF-Flat / HNSW, approximate, all vectors in RAM.
- ``ivfpq``: FAISS IVF-PQ trained on a sample (``nlist``, ``pq_m``, ``pq_nbits``, ``nprobe``). With
  ``rerank`` > 0 the float vectors are also written to ``dense.vectors`` and read row by row at
  search time: ``rerank * k`` PQ candidates are re-scored exactly. With ``on_disk`` the inverted
  lists live in ``dense.ivfdata`` (FAISS ``OnDiskInvertedLists``, memory-mapped), so neither the
  build nor a search holds the codes in RAM.
- ``qdrant``: a Qdrant collection through ``qdrant-client``; ``location`` empty keeps an embedded
  local store in the index folder (``qdrant/``), a folder path puts the local store there, an
  ``http(s)://`` URL talks to a Qdrant server or cluster.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import faiss
import numpy as np
from pydantic import Field

from tandem.errors import ConfigError, IndexError_
from tandem.index.arrays import RowFile, Rows, as_f32, rescore
from tandem.index.qdrant_store import QDRANT_DEFAULTS, QDRANT_DIR, QdrantStore  # noqa: F401 - QDRANT_DIR: index files
from tandem.registry import STORES, NoSettings
from tandem.settings import Settings

DENSE_FILE = "dense.faiss"
VECTORS_FILE = "dense.vectors"  # raw float32 rows (n, dim), for re-ranking IVF-PQ candidates
IVFDATA_FILE = "dense.ivfdata"
FAISS_KINDS = ("flat", "ivf", "hnsw", "ivfpq")
DEFAULT_DENSE: dict[str, Any] = {
    "store": "faiss", "faiss": "flat", "nlist": None, "nprobe": 16, "hnsw_m": 32, "ef_search": 128,
}
IVFPQ_DEFAULTS: dict[str, Any] = {"pq_m": None, "pq_nbits": 8, "rerank": 10, "on_disk": False, "train_size": 100_000}

# faiss skips BLAS below 128,000 query x doc pairs by default; batched searches are ~10x faster with BLAS.
faiss.cvar.distance_compute_blas_threshold = 20


@runtime_checkable
class VectorStore(Protocol):
    """Nearest neighbours by inner product over rows 0..ntotal-1 (row i is the i-th document)."""

    dim: int
    params: dict[str, Any]  # what the manifest records; a store fills in what it resolved (nlist, ...)

    @property
    def ntotal(self) -> int: ...

    def train(self, sample: np.ndarray) -> None:
        """Fit what the kind learns from data (IVF centroids, PQ codebooks); a no-op for the others."""

    def add(self, vectors: np.ndarray) -> None:
        """Append rows (n, dim) float32; called once per batch."""

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, rows)``, both (n_queries, k), best first; rows of -1 where fewer than k exist."""

    def reconstruct_n(self, start: int, n: int) -> np.ndarray:
        """The stored vectors of rows ``start .. start+n-1`` (exactly for the exact kinds)."""

    def exact_rows(self) -> Rows | None:
        """The exact float rows, indexable by an array of row numbers without copying the store (a view
        of a flat index, or the re-scoring file of IVF-PQ), or None where the store keeps none."""

    def save(self, folder: Path) -> None:
        """Write the store's files into the index folder (called once, after the last ``add``)."""


def training_rows(params: dict[str, Any], n: int) -> np.ndarray | None:
    """The rows of an ``n``-row training sample a store learns from: None for all of them; IVF-PQ keeps
    ``train_size`` rows drawn with a fixed seed, in order (a caller holding the sample on disk reads only those)."""
    if params.get("faiss") != "ivfpq":
        return None
    limit = int({**IVFPQ_DEFAULTS, **params}["train_size"])
    return np.sort(np.random.default_rng(0).choice(n, limit, replace=False)) if n > limit else None


def default_nlist(n: int) -> int:
    """About 4 sqrt(n) lists, and at least 39 training points per list (FAISS's advice)."""
    return max(1, min(int(4 * math.sqrt(n)), n // 39 or 1))


@contextlib.contextmanager
def _c_stdout_to_stderr() -> Iterator[None]:
    """FAISS's on-disk lists print "resizing ..." from C to stdout; send it to stderr (stdout may be JSON)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


class FaissStore:
    """A FAISS index of one of :data:`FAISS_KINDS`, plus the float rows on disk for IVF-PQ re-ranking."""

    def __init__(self, params: dict[str, Any], dim: int, folder: Path | None = None,
                 index: faiss.Index | None = None) -> None:
        kind = params.get("faiss")
        if kind not in FAISS_KINDS:
            raise ConfigError(f"unknown faiss index kind {kind!r}; choose one of {sorted(FAISS_KINDS)}")
        self.params = {**(IVFPQ_DEFAULTS if kind == "ivfpq" else {}), **params}
        self.dim, self.kind, self.folder = dim, kind, folder
        self.index: faiss.Index | None = index
        self._raw: Any = None  # open file the float rows are appended to (ivfpq with rerank)
        self._vectors: RowFile | None = None  # the float rows, read on demand at search time
        if index is None and kind in ("flat", "hnsw"):
            self.index = (faiss.IndexFlatIP(dim) if kind == "flat"
                          else faiss.IndexHNSWFlat(dim, self.params["hnsw_m"], faiss.METRIC_INNER_PRODUCT))
        if self.index is not None:  # an opened index searches with these params, not the ones saved in it
            self._set_search_params()

    @property
    def ntotal(self) -> int:
        return 0 if self.index is None else int(self.index.ntotal)

    @property
    def _reranks(self) -> bool:
        return self.kind == "ivfpq" and bool(self.params["rerank"])

    def train(self, sample: np.ndarray) -> None:
        if self.kind not in ("ivf", "ivfpq"):
            return
        sample = as_f32(sample, self.dim, "training sample")
        picked = training_rows(self.params, len(sample))
        if picked is not None:
            sample = sample[picked]
        nlist = self.params.get("nlist") or default_nlist(len(sample))
        quantizer = faiss.IndexFlatIP(self.dim)
        if self.kind == "ivf":
            index: faiss.Index = faiss.IndexIVFFlat(quantizer, self.dim, nlist, faiss.METRIC_INNER_PRODUCT)
        else:
            m = self.params.get("pq_m") or _default_pq_m(self.dim)
            if self.dim % m:
                raise ConfigError(f"pq_m={m} must divide the vector dimension {self.dim}")
            nbits = self.params["pq_nbits"]
            if len(sample) < 2 ** nbits:
                raise ConfigError(f"IVF-PQ with pq_nbits={nbits} needs at least {2 ** nbits} training vectors, "
                                  f"got {len(sample)}: use flat, or a smaller pq_nbits")
            index = faiss.IndexIVFPQ(quantizer, self.dim, nlist, m, nbits, faiss.METRIC_INNER_PRODUCT)
            self.params["pq_m"] = m
        index.train(sample)
        self.params["nlist"] = nlist
        self.index = index
        if self.kind == "ivfpq" and self.params["on_disk"]:
            self._need_folder("on_disk")
            lists = faiss.OnDiskInvertedLists(nlist, index.code_size, str(self.folder / IVFDATA_FILE))
            lists.this.disown()  # the index owns it from here
            index.replace_invlists(lists, True)
        self._set_search_params()

    def add(self, vectors: np.ndarray) -> None:
        vectors = as_f32(vectors, self.dim, "vectors to add")
        if self.index is None:
            raise ConfigError(f"a {self.kind} store must be trained before vectors are added")
        if self._reranks:
            if self._raw is None:
                self._raw = open(self._need_folder("rerank") / VECTORS_FILE, "ab")  # noqa: SIM115 (closed in save)
            self._raw.write(vectors.tobytes())
        with _c_stdout_to_stderr() if self.params.get("on_disk") else contextlib.nullcontext():
            self.index.add(vectors)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = as_f32(queries, self.dim, "query vectors")
        if self.index is None or self.ntotal == 0:
            return np.full((len(queries), k), -np.inf, np.float32), np.full((len(queries), k), -1, np.int64)
        if not self._reranks:
            return self.index.search(queries, k)
        _, candidates = self.index.search(queries, min(self.ntotal, k * int(self.params["rerank"])))
        return rescore(queries, candidates, self._rows(), k)

    def reconstruct_n(self, start: int, n: int) -> np.ndarray:
        if self._reranks:
            return np.array(self._rows()[start:start + n])
        if self.kind in ("ivf", "ivfpq"):
            ivf = faiss.extract_index_ivf(self.index)
            if ivf.direct_map.type == faiss.DirectMap.NoMap:  # built once (O(n)); FAISS keeps it up to date on add
                ivf.make_direct_map()
        return self.index.reconstruct_n(start, n)

    def exact_rows(self) -> Rows | None:
        if self._reranks:
            return self._rows()
        return FlatView(self.index) if self.kind == "flat" else None

    def save(self, folder: Path) -> None:
        if self.index is None:
            raise ConfigError(f"a {self.kind} store must be trained before it is saved")
        if self._raw is not None:
            self._raw.close()
            self._raw = None
        faiss.write_index(self.index, str(folder / DENSE_FILE))

    @classmethod
    def open(cls, folder: Path, params: dict[str, Any]) -> FaissStore:
        """Read the index of a folder and restore its search-time settings."""
        path = folder / DENSE_FILE
        if not path.exists():
            raise IndexError_(f"cannot load index {folder}: no {DENSE_FILE}")
        flags = faiss.IO_FLAG_ONDISK_SAME_DIR if params.get("on_disk") else 0
        with _c_stdout_to_stderr():  # "IO_FLAG_ONDISK_SAME_DIR: updating ondisk filename ..."
            index = faiss.read_index(str(path), flags)
        return cls(params, index.d, folder, index)

    def _set_search_params(self) -> None:
        if self.kind in ("ivf", "ivfpq"):
            ivf = faiss.extract_index_ivf(self.index)
            ivf.nprobe = min(self.params["nprobe"], ivf.nlist)
        elif self.kind == "hnsw":
            self.index.hnsw.efSearch = self.params["ef_search"]

    def _rows(self) -> RowFile:
        if self._vectors is None or len(self._vectors) < self.ntotal:
            self._vectors = RowFile(self._need_folder("rerank") / VECTORS_FILE, self.ntotal, self.dim)
        return self._vectors

    def _need_folder(self, option: str) -> Path:
        if self.folder is None:
            raise ConfigError(f"an ivfpq store with {option} writes files: give it a folder")
        return self.folder


class FlatView:
    """The vectors of a flat FAISS index as a numpy view (no copy), holding the index alive."""

    def __init__(self, index: faiss.IndexFlat) -> None:
        self.index = index
        self.array = faiss.rev_swig_ptr(index.get_xb(), index.ntotal * index.d).reshape(index.ntotal, index.d)

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, key: Any) -> np.ndarray:
        return self.array[key]


def _default_pq_m(dim: int) -> int:
    """8 dimensions per sub-quantiser where the dimension allows (384 -> 48 bytes a vector)."""
    return next(m for m in (dim // 8, dim // 4, dim // 2, dim) if m and dim % m == 0)


StoreFactory = Callable[[dict[str, Any], int, "Path | None"], VectorStore]
StoreOpener = Callable[[Path, dict[str, Any]], VectorStore]
BACKENDS: dict[str, tuple[StoreFactory, StoreOpener]] = {
    "faiss": (FaissStore, FaissStore.open),
    "qdrant": (QdrantStore, QdrantStore.open),
}


def _store_kind(params: dict[str, Any]) -> str:
    kind = params.get("store", "faiss")
    if kind not in BACKENDS:
        raise ConfigError(f"unknown vector store {kind!r}; choose one of {sorted(BACKENDS)}")
    return kind


KNOWN_PARAMS = {*DEFAULT_DENSE, *IVFPQ_DEFAULTS, *QDRANT_DEFAULTS, "dim"}


def new_store(params: dict[str, Any], dim: int, folder: Path | None = None) -> VectorStore:
    """An empty store as ``params`` say (``store``: faiss | qdrant), writing its files under ``folder``."""
    params = {**DEFAULT_DENSE, **params}
    kind = _store_kind(params)
    unknown = sorted(set(params) - KNOWN_PARAMS)
    if unknown:
        raise ConfigError(f"unknown vector store settings {unknown}; known: {sorted(KNOWN_PARAMS - {'dim'})}")
    if kind == "qdrant":
        params = {**params, "faiss": None, "dim": dim}  # the manifest must not claim a FAISS kind
    return BACKENDS[kind][0](params, dim, folder)


def open_store(folder: Path, params: dict[str, Any]) -> VectorStore:
    """The store an index folder holds, with the search-time settings of its manifest ``params``."""
    params = {**DEFAULT_DENSE, **params}
    return BACKENDS[_store_kind(params)][1](Path(folder), params)


def build_store(vectors: np.ndarray, params: dict[str, Any], folder: Path, batch_size: int = 65_536) -> VectorStore:
    """Train, fill and save a store over ``vectors`` held in memory into ``folder`` (made if missing);
    returns it (its ``params`` resolved)."""
    folder.mkdir(parents=True, exist_ok=True)
    store = new_store(params, vectors.shape[1], folder)
    store.train(vectors)
    for start in range(0, len(vectors), batch_size):
        store.add(vectors[start:start + batch_size])
    store.save(folder)
    return store


class IVFSettings(Settings):
    """IVF-Flat: FAISS inverted lists over exact vectors (inner product)."""

    nlist: int | None = Field(None, ge=1, description="inverted lists (default: about 4 sqrt(n))")
    nprobe: int = Field(DEFAULT_DENSE["nprobe"], ge=1, description="lists probed per query")


class HNSWSettings(Settings):
    """HNSW: FAISS graph index over exact vectors."""

    hnsw_m: int = Field(DEFAULT_DENSE["hnsw_m"], ge=2, le=256, description="graph degree")
    ef_search: int = Field(DEFAULT_DENSE["ef_search"], ge=1, description="candidates kept while searching")


class IVFPQSettings(IVFSettings):
    """IVF-PQ: product-quantised codes, re-scored exactly from the float vectors on disk (docs/scale.md)."""

    pq_m: int | None = Field(IVFPQ_DEFAULTS["pq_m"], ge=1, description="sub-quantisers (must divide the dimension; "
                                                                        "default: dim / 8)")
    pq_nbits: int = Field(IVFPQ_DEFAULTS["pq_nbits"], ge=1, le=16, description="bits per sub-quantiser code")
    rerank: int = Field(IVFPQ_DEFAULTS["rerank"], ge=0, description="re-score k x rerank candidates exactly (0: off)")
    on_disk: bool = Field(IVFPQ_DEFAULTS["on_disk"], description="inverted lists in a file, not in memory")
    train_size: int = Field(IVFPQ_DEFAULTS["train_size"], ge=1, description="vectors sampled to train on")


class QdrantSettings(Settings):
    """Qdrant: embedded local mode in the index folder or PATH, or a server at http(s)://HOST:PORT."""

    collection: str | None = Field(QDRANT_DEFAULTS["collection"], description="collection name (default: from the "
                                                                               "index folder)")
    upload_batch: int = Field(QDRANT_DEFAULTS["upload_batch"], ge=1, description="points per upload request")
    timeout: int = Field(QDRANT_DEFAULTS["timeout"], ge=1, description="server request timeout, seconds")


@STORES.register("flat", doc="FAISS exact inner product (the default)")
def _flat(settings: NoSettings, location: str = "") -> dict[str, Any]:
    return {"store": "faiss", "faiss": "flat"}


@STORES.register("ivf", settings=IVFSettings)
def _ivf(settings: IVFSettings, location: str = "") -> dict[str, Any]:
    return {"store": "faiss", "faiss": "ivf", **settings.model_dump(exclude_unset=True)}


@STORES.register("hnsw", settings=HNSWSettings)
def _hnsw(settings: HNSWSettings, location: str = "") -> dict[str, Any]:
    return {"store": "faiss", "faiss": "hnsw", **settings.model_dump(exclude_unset=True)}


@STORES.register("ivfpq", settings=IVFPQSettings)
def _ivfpq(settings: IVFPQSettings, location: str = "") -> dict[str, Any]:
    return {"store": "faiss", "faiss": "ivfpq", **settings.model_dump(exclude_unset=True)}


@STORES.register("qdrant", settings=QdrantSettings, needs=("qdrant-client",))
def _qdrant(settings: QdrantSettings, location: str = "") -> dict[str, Any]:
    return {"store": "qdrant", "faiss": None, "location": location, **settings.model_dump(exclude_unset=True)}


def parse_store(spec: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Dense parameters for a ``--store`` value (flat | ivf | hnsw | ivfpq | qdrant[:PATH|URL]) and its
    ``--store-opt`` settings, checked against the store's settings model (``tandem stores NAME`` lists them)."""
    name, sep, location = spec.partition(":")
    if name not in STORES or (sep and name != "qdrant"):
        raise ConfigError(f"unknown vector store {spec!r}; give one of {', '.join(STORES.names())}, "
                          "qdrant:PATH (an embedded store in that folder) or qdrant:http://HOST:6333 (a server)")
    entry = STORES.get(name)
    return entry.build(entry.validate(options or {}, where=f"{name} store settings"), location)
