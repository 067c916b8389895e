"""The read side of an index folder: :class:`Index` (manifest, documents, and the BM25 index, vector store,
encoder and extras loaded on first use), :func:`open_index` and :func:`verify_index`. Building and
extending folders is :mod:`tandem.index.build`'s."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from tandem.errors import DamagedError, DataError, IndexError_
from tandem.index.bm25 import BM25_DIR, load_bm25
from tandem.index.encoder import Encoder, load_encoder
from tandem.index.manifest import Manifest, corpus_hash
from tandem.index.store import DOCS_FILE, DocStore
from tandem.index.vectors import DENSE_FILE, VectorStore, open_store
from tandem.model_files import canonical_name
from tandem.outdir import check_files, damaged_files, read_marker, recover_swap
from tandem.types import Document

#: the folder of per-document arrays (``extras/<name>.npy``)
EXTRAS_DIR = "extras"


def repair_hint(folder: Path, file: str) -> str:
    """How to repair the damaged ``file`` of the index ``folder``: an extra is computed again with
    ``--add-extras``, any other file needs a rebuild."""
    if file.startswith(f"{EXTRAS_DIR}/"):
        name = Path(file).stem.split("_")[0]
        return f"compute it again: tandem index --index {folder} --add-extras {name}"
    return f"rebuild the index: tandem index --out {folder} ... (with the corpus it was built from)"


class Index:
    """A loaded index folder: manifest, documents, and lazily loaded BM25 / FAISS / encoder / extras."""

    def __init__(self, folder: str | Path, *, encoder: str | Encoder | None = None,
                 corpus: Sequence[Document] | None = None, encoder_backend: str | None = None) -> None:
        """``encoder``: a name to check against the manifest, or an Encoder object to check and use."""
        self.folder = Path(folder)
        recover_swap(self.folder)
        check_files(self.folder, lambda file: repair_hint(self.folder, file))  # sizes: cheap (verify hashes)
        self.manifest = Manifest.load(self.folder)
        if encoder is not None and not isinstance(encoder, str):
            self.__dict__["encoder"] = encoder  # fills the cached property below
        self.manifest.check(
            encoder=canonical_name(encoder if isinstance(encoder, str) else encoder.name) if encoder else None,
            corpus=corpus_hash(corpus) if corpus is not None else None,
            folder=str(self.folder),
        )
        self._encoder_backend = encoder_backend
        with self._reading(DOCS_FILE):
            self.store = DocStore.load(self.folder)

    def fix(self, file: str) -> str:
        """How to repair the damaged ``file`` of this index (:func:`repair_hint`)."""
        return repair_hint(self.folder, file)

    @contextlib.contextmanager
    def _reading(self, file: str) -> Iterator[None]:
        """Turn a failure to read a component into a DamagedError naming the file and the fix (the
        libraries' own errors for damaged files: FAISS's RuntimeError, numpy's ValueError, ...)."""
        try:
            yield
        except (OSError, ValueError, KeyError, EOFError, RuntimeError, DataError, json.JSONDecodeError) as exc:
            reason = " ".join(str(exc).split())[:300]
            raise DamagedError(f"cannot read {self.folder / file} ({type(exc).__name__}: {reason}): the file is "
                               f"damaged; {self.fix(file)}") from exc

    @property
    def kind(self) -> str:
        return self.manifest.kind

    def has(self, component: str) -> bool:
        """Whether the index holds ``component``: a part of its kind (bm25, dense) or an extra (graph, rala:
        arrays named ``<extra>_*``)."""
        return component in self.manifest.components or any(name.startswith(f"{component}_")
                                                            for name in self.manifest.extras)

    @cached_property
    def bm25(self) -> Any:
        self._need("bm25")
        with self._reading(BM25_DIR):
            return load_bm25(self.folder, mmap=True)

    @cached_property
    def faiss(self) -> VectorStore:
        """The dense vector store (FAISS or Qdrant, see ``tandem.index.vectors``)."""
        self._need("dense")
        params = self.manifest.params["dense"]
        with self._reading(DENSE_FILE) if params.get("store", "faiss") == "faiss" else contextlib.nullcontext():
            return open_store(self.folder, params)

    @cached_property
    def encoder(self) -> Encoder:
        if self.manifest.encoder is None:
            raise IndexError_(f"index {self.folder} has no encoder (kind {self.kind!r})")
        kwargs = {"backend": self._encoder_backend} if self._encoder_backend else {}
        return load_encoder(self.manifest.encoder, **kwargs)

    def extra(self, name: str) -> np.ndarray:
        """A per-document array stored at build time, memory-mapped."""
        if name not in self.manifest.extras:
            raise IndexError_(f"index {self.folder} has no extra array {name!r}; it has {sorted(self.manifest.extras)}")
        with self._reading(f"{EXTRAS_DIR}/{name}.npy"):
            array = np.load(self.folder / EXTRAS_DIR / f"{name}.npy", mmap_mode="r")
        expected = self.manifest.extras[name].get("shape")
        if expected is not None and list(array.shape) != list(expected):
            raise DamagedError(f"{self.folder / EXTRAS_DIR / name}.npy has shape {list(array.shape)}, the manifest "
                               f"records {expected}: the file is damaged; {self.fix(f'{EXTRAS_DIR}/{name}.npy')}")
        return array

    def _need(self, component: str) -> None:
        if not self.has(component):
            raise IndexError_(f"index {self.folder} is {self.kind!r} and has no {component} component")


def verify_index(folder: str | Path) -> dict[str, Any]:
    """Check an index folder in full: every file recorded at build time against its size and sha256,
    then every component opened. A DamagedError lists each damaged file and the fix; returns what was
    checked (``files``: how many were hashed, 0 for a folder built before the records existed)."""
    path = Path(folder)
    recover_swap(path)
    problems = damaged_files(path, deep=True)
    if problems:
        lines = "; ".join(f"{path / rel} {problem} ({repair_hint(path, rel)})" for rel, problem in problems)
        raise DamagedError(f"index {path}: {len(problems)} damaged file{'s' if len(problems) > 1 else ''}: {lines}")
    Manifest.load(path)  # a clear error for a folder that is not an index
    index = open_index(path)
    _ = len(index.store), index.store.ids  # every docs.jsonl line parsed
    components = ["docs"]
    if index.has("bm25"):
        _ = index.bm25
        components.append("bm25")
    if index.has("dense"):
        store = index.faiss
        if store.ntotal != index.manifest.doc_count:
            raise DamagedError(f"{path / DENSE_FILE} holds {store.ntotal} vectors for {index.manifest.doc_count} "
                               f"documents: the file is damaged; {index.fix(DENSE_FILE)}")
        components.append("dense")
    for name in index.manifest.extras:
        index.extra(name)
        components.append(f"extra {name}")
    return {"index": str(path), "files": len((read_marker(path) or {}).get("files") or {}),
            "documents": index.manifest.doc_count, "components": components}


def open_index(folder: str | Path, **kwargs: Any) -> Index:
    """Open an index folder; see ``Index`` for the checks it makes."""
    return Index(folder, **kwargs)
