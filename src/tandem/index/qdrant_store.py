"""The Qdrant vector store: a Qdrant collection through ``qdrant-client`` (points numbered by row, dot-product
distance). ``location`` empty keeps an embedded local store in the index folder (``qdrant/``), a folder path
puts the local store there, an ``http(s)://`` URL talks to a Qdrant server or cluster. The protocol it
follows and the FAISS stores are :mod:`tandem.index.vectors`'s."""

from __future__ import annotations

import atexit
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from tandem.errors import ConfigError, IndexError_
from tandem.index.arrays import Rows, as_f32

QDRANT_DIR = "qdrant"
QDRANT_DEFAULTS: dict[str, Any] = {"location": "", "collection": None, "upload_batch": 1024, "timeout": 10}


class QdrantStore:
    """A Qdrant collection (points numbered by row, dot-product distance), embedded or on a server."""

    def __init__(self, params: dict[str, Any], dim: int, folder: Path | None = None, *, create: bool = True) -> None:
        self.params = {**QDRANT_DEFAULTS, **params}
        self.params["collection"] = self.params["collection"] or f"tandem-{uuid.uuid4().hex[:12]}"
        location = self.params["location"]
        if create and location and not _is_url(location):  # the manifest must find it from any directory
            self.params["location"] = str(Path(location).resolve())
        self.dim, self.folder = dim, folder
        self.client = _qdrant_client(self.params["location"], folder, self.params["timeout"])
        self.collection = self.params["collection"]
        self._count = 0
        if create:
            from qdrant_client import models

            if self.client.collection_exists(self.collection):
                self.client.delete_collection(self.collection)
            self.client.create_collection(self.collection, vectors_config=models.VectorParams(
                size=dim, distance=models.Distance.DOT, on_disk=True))
            _no_fsync_while_building(self.client, self.collection)
        else:
            if not self.client.collection_exists(self.collection):
                raise IndexError_(f"Qdrant at {_where(self.params['location'], folder)} has no collection "
                                  f"{self.collection!r}: the index's vectors are gone; rebuild it")
            self._count = self.client.count(self.collection, exact=True).count

    @property
    def ntotal(self) -> int:
        return self._count

    def train(self, sample: np.ndarray) -> None:
        """Nothing to learn."""

    def add(self, vectors: np.ndarray) -> None:
        from qdrant_client import models

        vectors = as_f32(vectors, self.dim, "vectors to add")
        step = int(self.params["upload_batch"])
        for start in range(0, len(vectors), step):
            part = vectors[start:start + step]
            ids = list(range(self._count + start, self._count + start + len(part)))
            self.client.upsert(self.collection, points=models.Batch(ids=ids, vectors=part), wait=True)
        self._count += len(vectors)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        from qdrant_client import models

        queries = as_f32(queries, self.dim, "query vectors")
        scores = np.full((len(queries), k), -np.inf, np.float32)
        rows = np.full((len(queries), k), -1, np.int64)
        if not len(queries):
            return scores, rows
        requests = [models.QueryRequest(query=q.tolist(), limit=k) for q in queries]
        for qi, response in enumerate(self.client.query_batch_points(self.collection, requests)):
            points = response.points[:k]
            scores[qi, :len(points)] = [p.score for p in points]
            rows[qi, :len(points)] = [int(p.id) for p in points]
        return scores, rows

    def reconstruct_n(self, start: int, n: int) -> np.ndarray:
        points = self.client.retrieve(self.collection, ids=list(range(start, start + n)), with_vectors=True)
        by_id = {int(p.id): p.vector for p in points}
        return np.asarray([by_id[i] for i in range(start, start + n)], dtype=np.float32)

    def exact_rows(self) -> Rows | None:
        return None

    def save(self, folder: Path) -> None:
        """Points are written as they are added; an embedded store is closed (a build's folder is renamed next)."""
        if _is_url(self.params["location"]):
            return
        _close_local(self.client)

    @classmethod
    def open(cls, folder: Path, params: dict[str, Any]) -> QdrantStore:
        """Reconnect to the collection a build wrote."""
        return cls(params, int(params["dim"]), folder, create=False)


def _no_fsync_while_building(client: Any, collection: str) -> None:
    """The embedded store commits every point to SQLite with an fsync (~20 ms a point on a shared disk).
    A build that dies is discarded whole, so its writes need no fsync: switch it off for this
    connection (closed, and so flushed, by ``save``). Servers, and clients without that layout, are
    left alone."""
    storage = getattr(getattr(getattr(client, "_client", None), "collections", {}).get(collection), "storage", None)
    connection = getattr(storage, "storage", None)
    if connection is not None:
        connection.execute("PRAGMA synchronous=OFF")


def _is_url(location: str) -> bool:
    return location.startswith(("http://", "https://"))


def _where(location: str, folder: Path | None) -> str:
    return location or str((folder or Path(".")) / QDRANT_DIR)


_LOCAL_CLIENTS: dict[str, Any] = {}  # one embedded client per storage folder (Qdrant locks the folder)


def _qdrant_client(location: str, folder: Path | None, timeout: int) -> Any:
    try:
        from qdrant_client import QdrantClient
    except ImportError as exc:
        raise ConfigError("the qdrant store needs qdrant-client: pip install 'tandem[qdrant]'") from exc
    if _is_url(location):
        client = QdrantClient(url=location, timeout=timeout)
        try:
            client.get_collections()
        except Exception as exc:  # noqa: BLE001 (httpx, grpc and qdrant errors all mean the same here)
            raise IndexError_(f"cannot reach the Qdrant server at {location}: {type(exc).__name__}: {exc}") from exc
        return client
    if not location and folder is None:
        raise ConfigError("an embedded Qdrant store needs a folder: give qdrant:PATH or build into an index folder")
    path = str(Path(location).resolve() if location else folder / QDRANT_DIR)  # type: ignore[operator]
    if path not in _LOCAL_CLIENTS:
        _LOCAL_CLIENTS[path] = QdrantClient(path=path)
    return _LOCAL_CLIENTS[path]


@atexit.register
def _close_all_local() -> None:
    """Close embedded stores before interpreter shutdown (their finalizers fail once imports are gone)."""
    for client in list(_LOCAL_CLIENTS.values()):
        _close_local(client)


def _close_local(client: Any) -> None:
    for path, known in list(_LOCAL_CLIENTS.items()):
        if known is client:
            del _LOCAL_CLIENTS[path]
    client.close()
