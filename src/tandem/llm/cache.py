"""SQLite response cache: makes evaluation reproducible and resumable.

Key: sha256 of backend + model + the request's canonical JSON. Only deterministic requests
(``temperature == 0``) are cached unless ``force=True``. One SQLite connection per thread, WAL
journal, so many eval threads can read and write at once.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tandem.llm.base import LLM, LLMRequest, LLMResponse, constrains_json

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    model TEXT NOT NULL,
    request TEXT NOT NULL,
    response TEXT NOT NULL,
    created REAL NOT NULL
)
"""


def backend_of(llm: LLM) -> str:
    """Backend part of an LLM's spec (``openai`` for ``openai:m@url``)."""
    return str(getattr(llm, "spec", "")).split(":", 1)[0] or type(llm).__name__


def cache_key(backend: str, model: str, req: LLMRequest, *, constrained: bool = False) -> str:
    """sha256 hex of backend + model + canonical request JSON (+ a marker when the reply is decoded
    under the request's JSON schema: a grammar-decoded reply differs from a prompted one)."""
    body: dict[str, Any] = {"backend": backend, "model": model, "request": req.to_dict()}
    if constrained:
        body["decoding"] = "json_schema"
    payload = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def copy_responses(src: str | Path, dst: str | Path, contains: str) -> int:
    """Copy into the cache at ``dst`` (created if absent) the responses of the cache at ``src`` whose
    request text contains ``contains``; rows ``dst`` already holds are kept. Returns the rows added.
    A run asks again what another run of the same LLM asked (a judge's calibration pairs, for one): seeded
    with those replies, it computes only what is new to it. Only the same backend and model can hit them."""
    if not Path(src).is_file():
        raise FileNotFoundError(f"no response cache at {src}")
    conn = sqlite3.connect(dst, timeout=30.0)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(_SCHEMA)
        conn.execute("ATTACH DATABASE ? AS src", (str(src),))
        with conn:
            cur = conn.execute("INSERT OR IGNORE INTO responses SELECT * FROM src.responses WHERE instr(request, ?) > 0",
                               (contains,))
        conn.execute("DETACH DATABASE src")
        return cur.rowcount
    finally:
        conn.close()


class CachedLLM:
    """Wraps any LLM; answers repeated deterministic requests from SQLite (``cached=True``).

    Other attributes (``tokenizer``, ``input_embeddings``, ...) are forwarded to the wrapped LLM.
    ``hits`` and ``misses`` count lookups since construction.
    """

    def __init__(self, inner: LLM, path: str | Path, *, force: bool = False) -> None:
        self.inner = inner
        self.path = Path(path)
        self.force = force
        self.spec = inner.spec
        self.name = inner.name
        self.backend = backend_of(inner)
        self.hits = 0
        self.misses = 0
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._connect()  # create the table now, so errors show at construction

    def complete(self, req: LLMRequest) -> LLMResponse:
        """Cached answer when there is one, else the inner LLM's (stored when cacheable)."""
        if not self.cacheable(req):
            return self.inner.complete(req)
        key = cache_key(self.backend, self.name, req,
                        constrained=req.json_schema is not None and constrains_json(self.inner))
        conn = self._connect()
        row = conn.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
        if row is not None:
            with self._lock:
                self.hits += 1
            # replayed: no engine computed it, so none of its prompt came from a prefix cache either
            return replace(LLMResponse.from_dict(json.loads(row[0])), cached=True, reused_tokens=0)
        with self._lock:
            self.misses += 1
        resp = self.inner.complete(req)
        with conn:
            conn.execute(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?)",
                (key, self.backend, self.name, req.canonical_json(), json.dumps(resp.to_dict()), time.time()),
            )
        return resp

    def cacheable(self, req: LLMRequest) -> bool:
        """Whether ``req`` is looked up/stored: deterministic (temperature 0) or ``force``."""
        return self.force or req.temperature == 0

    def __len__(self) -> int:
        return int(self._connect().execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        """Close every thread's connection (and the inner LLM's, if it has ``close``)."""
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()
            self._local = threading.local()
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()

    def __getattr__(self, attr: str) -> Any:
        if attr == "inner":  # not yet set (during unpickling); avoid recursion
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def __repr__(self) -> str:
        return f"CachedLLM({self.inner!r}, path={str(self.path)!r})"

    def _connect(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            with conn:
                conn.execute(_SCHEMA)
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn
