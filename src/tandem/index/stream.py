"""Streaming, resumable encoding of a corpus into shards.

The documents are read from any iterable in shards of ``shard_size``; each shard's ``docs.jsonl``
lines and float32 vectors are written to a work folder beside the target (``.<name>.work/``) as
soon as they are encoded, then recorded in its ``progress.json`` with the corpus hash up to that
shard. Memory holds one shard at a time (a few with Ray), whatever the corpus size. A build that was
killed and is run again with the same settings re-reads the corpus, checks the hash of each finished
shard and encodes only from the first shard that is not finished (or that the corpus changed in).

Encoding goes through a :class:`ShardEncoder`: :class:`LocalEncoding` (this process) or
:class:`RayEncoding` (actors on a Ray cluster, results taken in shard order), which give the same
vectors: each shard is encoded by the same encoder with the same batch size.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import shutil
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tandem.errors import DataError
from tandem.index.encoder import Encoder, load_encoder
from tandem.index.manifest import corpus_hasher, update_corpus_hash
from tandem.index.store import doc_line
from tandem.io import atomic_open, atomic_path, write_json_atomic
from tandem.types import Document

PROGRESS = "progress.json"
#: Documents per shard when none is given: ~15 MB of 384-d vectors, a bounded working set.
DEFAULT_SHARD_SIZE = 10_000


def work_dir(out: Path) -> Path:
    """The work folder of a build of ``out``: ``.<name>.work`` beside it."""
    return out.parent / f".{out.name}.work"


def shards_of(docs: Iterable[Document], size: int) -> Iterator[list[Document]]:
    """``docs`` in consecutive lists of ``size`` (the last may be shorter)."""
    it = iter(docs)
    while shard := list(itertools.islice(it, size)):
        yield shard


#: ``on_texts(done)``: texts encoded so far in the shard being encoded.
OnTexts = Callable[[int], None]


class ShardEncoder(Protocol):
    """Encodes shards of texts, yielding one (n, dim) float32 array per shard, in order; may report
    progress within a shard through ``on_texts``."""

    def encode_shards(self, shards: Iterable[list[str]], on_texts: OnTexts | None = None) -> Iterator[np.ndarray]: ...


@dataclass
class LocalEncoding:
    """Encode each shard in this process."""

    encoder: Encoder
    batch_size: int = 64

    def encode_shards(self, shards: Iterable[list[str]], on_texts: OnTexts | None = None) -> Iterator[np.ndarray]:
        report = (lambda done, _total: on_texts(done)) if on_texts is not None else None
        for texts in shards:
            yield self.encoder.encode(texts, batch_size=self.batch_size, on_progress=report)


class _EncodeWorker:
    """A Ray actor holding one encoder (loaded by name on the worker, or the pickled object)."""

    def __init__(self, encoder: str | Encoder, backend: str | None, batch_size: int) -> None:
        kwargs = {"backend": backend} if backend else {}
        self.encoder = load_encoder(encoder, **kwargs) if isinstance(encoder, str) else encoder
        self.batch_size = batch_size

    def encode(self, texts: list[str]) -> np.ndarray:
        return self.encoder.encode(texts, batch_size=self.batch_size)


@dataclass
class RayEncoding:
    """Encode shards on a Ray cluster: ``workers`` actors each hold the encoder; shards go to them in
    turn, at most two per actor in flight, and come back in shard order.

    ``address``: a running cluster (``ray.init(address=...)``, e.g. ``auto`` or ``ray://host:10001``);
    None starts a local Ray with ``workers`` CPUs, shut down after. An encoder given by name is
    loaded on each worker (with ``backend``); an encoder object is sent pickled."""

    encoder: str | Encoder
    address: str | None = None
    backend: str | None = None
    batch_size: int = 64
    workers: int = 2
    init_kwargs: dict[str, Any] = field(default_factory=dict)

    def encode_shards(self, shards: Iterable[list[str]], on_texts: OnTexts | None = None) -> Iterator[np.ndarray]:
        """Progress is reported per shard only (``on_texts`` is not called)."""
        import ray

        started = not ray.is_initialized()
        if started:
            options = {"address": self.address} if self.address else {"num_cpus": self.workers}
            ray.init(**options, include_dashboard=False, log_to_driver=False, **self.init_kwargs)
        try:
            worker = ray.remote(num_cpus=1)(_EncodeWorker)
            actors = [worker.remote(self.encoder, self.backend, self.batch_size) for _ in range(self.workers)]
            pending: deque[Any] = deque()
            for i, texts in enumerate(shards):
                pending.append(actors[i % len(actors)].encode.remote(texts))
                if len(pending) >= 2 * len(actors):
                    yield ray.get(pending.popleft())
            while pending:
                yield ray.get(pending.popleft())
            for actor in actors:
                ray.kill(actor)
        finally:
            if started:
                ray.shutdown()


@dataclass
class Shard:
    """A finished shard of the work folder."""

    index: int
    count: int
    corpus_hash: str  # of every document up to the end of this shard

    @property
    def stem(self) -> str:
        return f"shard-{self.index:05d}"


class WorkFolder:
    """The shards of one build, kept across runs for as long as ``signature`` (the build's settings)
    stays the same."""

    def __init__(self, path: Path, signature: dict[str, Any]) -> None:
        self.path, self.signature = path, signature
        self.shards: list[Shard] = []
        progress = self._read_progress()
        if progress is not None and progress.get("signature") == signature:
            self.shards = [Shard(**s) for s in progress["shards"]]
        else:
            shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)

    def _read_progress(self) -> dict[str, Any] | None:
        try:
            data = json.loads((self.path / PROGRESS).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _save_progress(self) -> None:
        write_json_atomic(self.path / PROGRESS, {"signature": self.signature,
                                                 "shards": [vars(s) for s in self.shards]})

    @property
    def count(self) -> int:
        return sum(s.count for s in self.shards)

    def truncate(self, n: int) -> None:
        """Forget the shards from ``n`` on (the corpus changed there)."""
        del self.shards[n:]
        self._save_progress()

    def finish(self, docs: Sequence[Document], vectors: np.ndarray | None, running_hash: str) -> Shard:
        """Write the next shard (documents, then vectors), then record it as finished."""
        shard = Shard(len(self.shards), len(docs), running_hash)
        with atomic_open(self.path / f"{shard.stem}.jsonl", "wb") as handle:
            handle.writelines(doc_line(d) for d in docs)
        if vectors is not None:
            if len(vectors) != len(docs):
                raise DataError(f"the encoder returned {len(vectors)} vectors for {len(docs)} texts")
            with atomic_path(self.path / f"{shard.stem}.npy", suffix=".npy") as tmp:
                np.save(tmp, np.ascontiguousarray(vectors, dtype=np.float32))
        self.shards.append(shard)
        self._save_progress()
        return shard

    def doc_lines(self, shard: Shard) -> list[bytes]:
        with open(self.path / f"{shard.stem}.jsonl", "rb") as handle:
            return handle.readlines()

    def vectors(self, shard: Shard) -> np.ndarray:
        """The shard's vectors, memory-mapped."""
        return np.load(self.path / f"{shard.stem}.npy", mmap_mode="r")

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def encode_corpus(docs: Iterable[Document], work: WorkFolder, encoding: ShardEncoder | None, shard_size: int,
                  on_progress: Callable[[int, int], None] | None = None, total: int = 0) -> str:
    """Fill ``work`` with every shard of ``docs`` not finished yet; returns the corpus hash.
    ``on_progress(done, total)`` after each shard (``total`` 0 when the corpus size is unknown)."""
    hasher = corpus_hasher()
    queue: deque[tuple[list[Document], str]] = deque()

    def todo() -> Iterator[list[Document]]:
        seen = 0
        for k, shard in enumerate(shards_of(docs, shard_size)):
            seen = k + 1
            update_corpus_hash(hasher, shard)
            running = hasher.hexdigest()
            if k < len(work.shards):
                if work.shards[k].corpus_hash == running and work.shards[k].count == len(shard):
                    continue
                work.truncate(k)  # the corpus differs from here on: encode it again
            queue.append((shard, running))
            yield shard
        if len(work.shards) > seen:  # the corpus ends before the finished shards do
            work.truncate(seen)

    reported = [0]

    def report(done: int) -> None:  # each count once, rising
        if on_progress is not None and done > reported[0]:
            reported[0] = done
            on_progress(done, total)

    report(work.count)
    texts = ([d.contents for d in shard] for shard in todo())
    vector_stream: Iterator[np.ndarray | None] = (
        encoding.encode_shards(texts, lambda done: report(work.count + done)) if encoding is not None
        else (None for _ in texts))
    for vectors in vector_stream:
        shard, running = queue.popleft()
        work.finish(shard, vectors, running)
        report(work.count)
    return hasher.hexdigest()


def id_hash(doc_id: str) -> int:
    """A 64-bit hash of a document id (duplicate ids are found by sorting these, 8 bytes a document)."""
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest(), "little")
