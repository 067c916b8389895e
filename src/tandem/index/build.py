"""Build and open index folders.

An index folder holds ``manifest.json`` (written last), ``docs.jsonl`` and, by kind, a bm25s
index (``bm25/``), a dense vector store (``dense.faiss`` and, by store kind, ``dense.vectors``,
``dense.ivfdata`` or ``qdrant/``) and extra per-document arrays (``extras/*.npy``,
e.g. CoopRAG's per-layer [CLS] vectors). A build writes into a hidden sibling folder and renames
it into place when complete (:func:`tandem.outdir.atomic_dir`), so a killed build never leaves a
folder that loads, and a folder holding anything tandem did not write is never replaced.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from tandem.errors import ConfigError, IndexError_
from tandem.index.bm25 import DEFAULT_BM25, build_bm25, load_bm25
from tandem.index.encoder import Encoder, load_encoder
from tandem.index.manifest import MANIFEST, Manifest, corpus_hash
from tandem.index.store import DocStore
from tandem.index.vectors import DEFAULT_DENSE, VectorStore, build_store, open_store
from tandem.models import DEFAULT_ENCODER, canonical_name
from tandem.outdir import MARKER, atomic_dir, recover_swap
from tandem.types import Document, OnProgress

KINDS: dict[str, tuple[str, ...]] = {"bm25": ("bm25",), "dense": ("dense",), "hybrid": ("bm25", "dense")}
EXTRAS_DIR = "extras"

# An extra computes per-document arrays at build time from the store and the encoder. A builder may
# also carry ``name`` and ``params`` (recorded as ``manifest.params[name]`` after it ran) and
# ``needs_encoder = False`` (then a bm25 index is built without loading one).
ExtraBuilder = Callable[[DocStore, Encoder], dict[str, np.ndarray]]


def build_index(
    docs: Sequence[Document],
    out: str | Path,
    *,
    kind: str = "hybrid",
    encoder: str | Encoder = DEFAULT_ENCODER,
    bm25_params: dict[str, Any] | None = None,
    dense_params: dict[str, Any] | None = None,
    batch_size: int = 64,
    extras: Sequence[ExtraBuilder] = (),
    on_progress: OnProgress | None = None,
) -> Manifest:
    """Index ``docs`` into the folder ``out`` (replacing an existing index only once the new one is complete).
    ``on_progress(done, total)`` follows the encoding of the passages for the dense component."""
    if kind not in KINDS:
        raise ConfigError(f"unknown index kind {kind!r}; choose one of {sorted(KINDS)}")
    if not docs:
        raise ConfigError("cannot index an empty corpus")
    components = KINDS[kind]
    store = DocStore(docs)
    with atomic_dir(out, "index") as tmp:
        manifest = Manifest(kind=kind, components=list(components), doc_count=len(store), corpus_hash=corpus_hash(store.docs))
        store.save(tmp)
        if "bm25" in components:
            params = {**DEFAULT_BM25, **(bm25_params or {})}
            build_bm25(store.docs, tmp, params)
            manifest.params["bm25"] = params
        needs_encoder = "dense" in components or any(getattr(b, "needs_encoder", True) for b in extras)
        enc = (load_encoder(encoder) if isinstance(encoder, str) else encoder) if needs_encoder else None
        if enc is not None:
            manifest.encoder, manifest.dim, manifest.pooling = enc.name, enc.dim, enc.pooling
            manifest.encoder_backend = getattr(enc, "backend", None)
        if "dense" in components and enc is not None:
            params = {**DEFAULT_DENSE, **(dense_params or {})}
            vectors = enc.encode([d.contents for d in store.docs], batch_size=batch_size, on_progress=on_progress)
            manifest.params["dense"] = build_store(vectors, params, tmp).params
        _run_extras(extras, store, enc, tmp, manifest)
        manifest.save(tmp)
    return manifest


def _run_extras(extras: Sequence[ExtraBuilder], store: DocStore, enc: Encoder | None, folder: Path,
                manifest: Manifest) -> None:
    for builder in extras:
        for name, array in builder(store, enc).items():  # type: ignore[arg-type]
            _save_extra(folder, manifest, name, array)
        params = getattr(builder, "params", None)
        if params is not None:
            manifest.params[builder.name] = dict(params)  # type: ignore[attr-defined]


def add_extras(folder: str | Path, extras: Sequence[ExtraBuilder], *, out: str | Path | None = None,
               encoder: str | Encoder | None = None) -> Manifest:
    """Compute ``extras`` for an existing index and write the extended index to ``out`` (default: in
    place). The new folder is assembled beside the target (files of the source hard-linked when the
    file system allows, else copied) and swapped in whole, like a build; arrays an extra writes again
    replace the old ones."""
    import os
    import shutil

    src = Path(folder)
    recover_swap(src)
    Manifest.load(src)  # a clear error for a folder that is not an index, before any work

    def link_or_copy(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    with atomic_dir(out if out is not None else src, "index") as tmp:  # holds the target's lock
        manifest = Manifest.load(src)
        store = DocStore.load(src)
        enc = None
        if any(getattr(b, "needs_encoder", True) for b in extras):
            name = encoder if encoder is not None else manifest.encoder
            if name is None:
                raise ConfigError(f"index {src} has no encoder; give one for these extras")
            enc = load_encoder(name) if isinstance(name, str) else name
        shutil.copytree(src, tmp, copy_function=link_or_copy, dirs_exist_ok=True,
                        ignore=lambda _dir, names: [n for n in names if n == MARKER])
        (tmp / MANIFEST).unlink()  # written last, once the extras are in
        _run_extras(extras, store, enc, tmp, manifest)
        manifest.save(tmp)
    return manifest


def _save_extra(folder: Path, manifest: Manifest, name: str, array: np.ndarray) -> None:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ConfigError(f"extra array name {name!r} must be a plain file name")
    (folder / EXTRAS_DIR).mkdir(exist_ok=True)
    path = folder / EXTRAS_DIR / f"{name}.npy"
    path.unlink(missing_ok=True)  # may be a hard link to another index's file: never write through it
    np.save(path, array)
    manifest.extras[name] = {"dtype": str(array.dtype), "shape": list(array.shape)}


class Index:
    """A loaded index folder: manifest, documents, and lazily loaded BM25 / FAISS / encoder / extras."""

    def __init__(self, folder: str | Path, *, encoder: str | Encoder | None = None,
                 corpus: Sequence[Document] | None = None, encoder_backend: str | None = None) -> None:
        """``encoder``: a name to check against the manifest, or an Encoder object to check and use."""
        self.folder = Path(folder)
        recover_swap(self.folder)
        self.manifest = Manifest.load(self.folder)
        if encoder is not None and not isinstance(encoder, str):
            self.__dict__["encoder"] = encoder  # fills the cached property below
        self.manifest.check(
            encoder=canonical_name(encoder if isinstance(encoder, str) else encoder.name) if encoder else None,
            corpus=corpus_hash(corpus) if corpus is not None else None,
            folder=str(self.folder),
        )
        self._encoder_backend = encoder_backend
        try:
            self.store = DocStore.load(self.folder)
        except (OSError, ValueError, KeyError) as exc:
            raise IndexError_(f"cannot load index {self.folder}: unreadable documents ({exc})") from exc

    @property
    def kind(self) -> str:
        return self.manifest.kind

    def has(self, component: str) -> bool:
        return component in self.manifest.components

    @cached_property
    def bm25(self) -> Any:
        self._need("bm25")
        return load_bm25(self.folder, mmap=True)

    @cached_property
    def faiss(self) -> VectorStore:
        """The dense vector store (FAISS or Qdrant, see ``tandem.index.vectors``)."""
        self._need("dense")
        return open_store(self.folder, self.manifest.params["dense"])

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
        return np.load(self.folder / EXTRAS_DIR / f"{name}.npy", mmap_mode="r")

    def _need(self, component: str) -> None:
        if not self.has(component):
            raise IndexError_(f"index {self.folder} is {self.kind!r} and has no {component} component")


def open_index(folder: str | Path, **kwargs: Any) -> Index:
    """Open an index folder; see ``Index`` for the checks it makes."""
    return Index(folder, **kwargs)
