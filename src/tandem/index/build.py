"""Build, extend and open index folders.

An index folder holds ``manifest.json`` (written last), ``docs.jsonl`` with its offset index
``docs.offsets.npy`` and, by kind, a bm25s index (``bm25/``), a dense vector store (``dense.faiss``
and, by store kind, ``dense.vectors``, ``dense.ivfdata`` or ``qdrant/``: :mod:`tandem.index.vectors`) and
extra per-document arrays (``extras/*.npy``, e.g. CoopRAG's per-layer [CLS] vectors). A build
encodes the corpus shard by shard into a work folder beside the target (resumed after a kill,
:mod:`tandem.index.stream`), then assembles the index in a hidden sibling folder and renames it into
place when complete (:func:`tandem.outdir.atomic_dir`), so a killed build never leaves a folder that
loads, and a folder holding anything tandem did not write is never replaced.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from pathlib import Path
from typing import Any

import numpy as np

from tandem.errors import ConfigError, DataError, DuplicateIdError, IndexError_, WriteError
from tandem.index.bm25 import DEFAULT_BM25, BM25Builder
from tandem.index.encoder import ENCODERS, Encoder, load_encoder
from tandem.index.index import EXTRAS_DIR
from tandem.index.manifest import MANIFEST, Manifest, corpus_hasher, update_corpus_hash
from tandem.index.store import DOCS_FILE, DiskDocs, DocStore, DocsWriter, index_ids, parse_doc
from tandem.index.stream import (
    DEFAULT_SHARD_SIZE,
    LocalEncoding,
    ShardEncoder,
    WorkFolder,
    encode_corpus,
    id_hash,
    work_dir,
)
from tandem.index.vectors import (
    DEFAULT_DENSE,
    VectorStore,
    default_nlist,
    new_store,
    open_store,
    training_rows,
)
from tandem.io import atomic_open, write_error
from tandem.model_files import DEFAULT_ENCODER, canonical_name
from tandem.outdir import (
    MARKER,
    atomic_dir,
    check_owned,
    folder_lock,
    recover_swap,
)
from tandem.registry import INDEX_KINDS
from tandem.types import Document, OnProgress


@INDEX_KINDS.register("bm25", needs=("bm25",), doc="BM25 (bm25s) over title + text: English stop words, Snowball stems")
def _bm25_kind() -> tuple[str, ...]:
    return ("bm25",)


@INDEX_KINDS.register("dense", needs=("dense",), doc="the encoder's vectors in a vector store (--store)")
def _dense_kind() -> tuple[str, ...]:
    return ("dense",)


@INDEX_KINDS.register("hybrid", needs=("bm25", "dense"), doc="both, fused at search time (RRF or weighted)")
def _hybrid_kind() -> tuple[str, ...]:
    return ("bm25", "dense")


# An extra computes per-document arrays at build time from the store and the encoder. A builder may
# also carry ``name`` and ``params`` (recorded as ``manifest.params[name]`` after it ran) and
# ``needs_encoder = False`` (then a bm25 index is built without loading one).
ExtraBuilder = Callable[[DocStore, Encoder], dict[str, np.ndarray]]


def build_index(
    docs: Iterable[Document],
    out: str | Path,
    *,
    kind: str = "hybrid",
    encoder: str | Encoder = DEFAULT_ENCODER,
    bm25_params: dict[str, Any] | None = None,
    dense_params: dict[str, Any] | None = None,
    batch_size: int = 64,
    extras: Sequence[ExtraBuilder] = (),
    on_progress: OnProgress | None = None,
    shard_size: int = DEFAULT_SHARD_SIZE,
    encoding: ShardEncoder | None = None,
) -> Manifest:
    """Index ``docs`` (any iterable, read once, in shards of ``shard_size``) into the folder ``out``,
    replacing an existing index only once the new one is complete.

    Shards are encoded (by ``encoding``, default this process) into a work folder beside ``out``
    (:mod:`tandem.index.stream`); a build killed on the way and run again continues at the first
    unfinished shard. ``on_progress(done, total)`` counts documents encoded (``total`` is 0 when
    ``docs`` has no length)."""
    components = INDEX_KINDS.get(kind).build()  # an unknown kind: a ConfigError naming the kinds
    if shard_size < 1:
        raise ConfigError(f"shard size must be at least 1, got {shard_size}")
    if isinstance(docs, Sequence):  # in memory already: refuse an empty corpus or a repeated id before any work
        if not docs:
            raise ConfigError("cannot index an empty corpus")
        index_ids(docs)
    out = Path(out)
    needs_encoder = "dense" in components or any(getattr(b, "needs_encoder", True) for b in extras)
    enc = (load_encoder(encoder) if isinstance(encoder, str) else encoder) if needs_encoder else None
    manifest = Manifest(kind=kind, components=list(components), doc_count=0, corpus_hash="")
    if enc is not None:
        manifest.encoder, manifest.dim, manifest.pooling = enc.name, enc.dim, enc.pooling
        manifest.encoder_backend = getattr(enc, "backend", None)
    if "dense" in components and enc is not None and encoding is None:
        encoding = LocalEncoding(enc, batch_size)
    signature = {"kind": kind, "encoder": manifest.encoder, "backend": manifest.encoder_backend,
                 "dim": manifest.dim, "batch_size": batch_size, "shard_size": shard_size}
    with folder_lock(out):
        recover_swap(out)
        check_owned(out, "index", replacing=True)  # before any work
        work = WorkFolder(work_dir(out), signature)
        with _work_kept(work, out):
            _encode(docs, work, encoding if "dense" in components else None, shard_size, on_progress)
            with atomic_dir(out, "index") as tmp:
                _assemble(tmp, manifest, work, None, bm25_params, dense_params)
                _run_extras(extras, DocStore.load(tmp), enc, tmp, manifest)
                manifest.save(tmp)
        work.remove()
    return manifest


def add_documents(
    folder: str | Path,
    docs: Iterable[Document],
    *,
    encoder: str | Encoder | None = None,
    batch_size: int = 64,
    on_progress: OnProgress | None = None,
    shard_size: int = DEFAULT_SHARD_SIZE,
    encoding: ShardEncoder | None = None,
) -> Manifest:
    """Append ``docs`` to the index ``folder``: only they are encoded (resumably, as in a build), the
    vector index is extended, the bm25 index is re-scored over all documents (bm25s cannot extend one:
    IDF and mean length change), and the manifest's count and corpus hash follow. An id already in the
    index (or repeated among ``docs``) is a DataError naming it; the folder is replaced atomically."""
    src = Path(folder)
    with folder_lock(src):
        recover_swap(src)
        manifest = Manifest.load(src)
        if manifest.extras:
            raise ConfigError(f"index {src} has extras {sorted(manifest.extras)} computed over its documents: "
                              "rebuild it with the new documents instead of adding them")
        enc: Encoder | None = None
        if "dense" in manifest.components:
            if encoder is None:  # the index's own encoder, with the backend that made its vectors
                if manifest.encoder is None:
                    raise IndexError_(f"index {src} records no encoder; give one")
                same = {"backend": manifest.encoder_backend} if manifest.encoder_backend in ENCODERS else {}
                enc = load_encoder(manifest.encoder, **same)
            else:
                enc = load_encoder(encoder) if isinstance(encoder, str) else encoder
            manifest.check(encoder=canonical_name(enc.name), folder=str(src))
            encoding = encoding or LocalEncoding(enc, batch_size)
        signature = {"add_to": manifest.corpus_hash, "encoder": manifest.encoder, "batch_size": batch_size,
                     "shard_size": shard_size}
        work = WorkFolder(work_dir(src), signature)
        with _work_kept(work, src):
            _encode(docs, work, encoding if enc is not None else None, shard_size, on_progress)
            with atomic_dir(src, "index") as tmp:
                _assemble(tmp, manifest, work, src, manifest.params.get("bm25"), manifest.params.get("dense"))
                manifest.save(tmp)
        work.remove()
    return manifest


@contextlib.contextmanager
def _work_kept(work: WorkFolder, out: Path) -> Iterator[None]:
    """What becomes of the work folder when a build fails: a refused input (a DataError, e.g. a
    duplicate id or a malformed record) removes it; a write failure (full disk, read-only target) keeps
    the finished shards and names the folder with how to resume or remove it."""
    try:
        yield
    except (WriteError, OSError) as exc:
        error = exc if isinstance(exc, WriteError) else write_error(exc, out, "index")
        if error is None:
            raise
        if not work.shards:
            work.remove()
            raise error from exc
        raise WriteError(f"{error}; the {work.count} documents encoded so far are kept in {work.path}: free space "
                         f"and run the same command again to resume there, or delete that folder") from exc
    except DataError:
        work.remove()
        raise


def _encode(docs: Iterable[Document], work: WorkFolder, encoding: ShardEncoder | None, shard_size: int,
            on_progress: OnProgress | None) -> None:
    """Fill the work folder; on failure it is kept (for the next run to resume) only if a shard finished."""
    try:
        encode_corpus(docs, work, encoding, shard_size, on_progress, len(docs) if isinstance(docs, Sized) else 0)
    except BaseException:
        if not work.shards:
            work.remove()
        raise
    if not work.shards:
        work.remove()
        raise ConfigError("cannot index an empty corpus")


def _line_chunks(base: Path | None, work: WorkFolder, size: int = DEFAULT_SHARD_SIZE) -> Iterator[list[bytes]]:
    """The ``docs.jsonl`` lines of the new index: those of the ``base`` index, then every shard's."""
    if base is not None:
        with open(base / DOCS_FILE, "rb") as handle:
            while chunk := list(itertools.islice(handle, size)):
                yield chunk
    for shard in work.shards:
        yield work.doc_lines(shard)


def _assemble(tmp: Path, manifest: Manifest, work: WorkFolder, base: Path | None,
              bm25_params: dict[str, Any] | None, dense_params: dict[str, Any] | None) -> None:
    """Write the index files into ``tmp`` from the ``base`` index (if any) and the work folder's shards,
    in one streamed pass over the documents; fills the manifest's count, hash and parameters. A build's
    corpus hash is the one its work folder recorded with the last shard; an extended index's is computed here."""
    params = {**DEFAULT_BM25, **(bm25_params or {})}
    bm25 = BM25Builder(params, tmp) if "bm25" in manifest.components else None
    hasher, id_hashes = corpus_hasher() if base is not None else None, []
    with atomic_open(tmp / DOCS_FILE, "wb") as handle:
        writer = DocsWriter(handle)
        for lines in _line_chunks(base, work):
            writer.write_lines(lines)
            docs = [parse_doc(line) for line in lines]
            if hasher is not None:
                update_corpus_hash(hasher, docs)
            id_hashes.append(np.fromiter((id_hash(d.id) for d in docs), dtype=np.uint64, count=len(docs)))
            if bm25 is not None:
                bm25.add([d.contents for d in docs])
    writer.save_offsets(tmp)
    _check_unique_ids(np.concatenate(id_hashes), DiskDocs(tmp), base, manifest.doc_count if base else 0)
    manifest.doc_count = len(writer.offsets) - 1
    manifest.corpus_hash = hasher.hexdigest() if hasher is not None else work.shards[-1].corpus_hash
    if bm25 is not None:
        bm25.save(tmp)
        manifest.params["bm25"] = params
    if "dense" in manifest.components:
        dense = {**DEFAULT_DENSE, **(dense_params or {})}
        manifest.params["dense"] = _vector_index(dense, [work.vectors(s) for s in work.shards], tmp, base)


def _check_unique_ids(id_hashes: np.ndarray, docs: DiskDocs, base: Path | None, base_count: int) -> None:
    """A DataError for the first id found twice (the ``base`` index holds the first ``base_count`` rows)."""
    order = np.argsort(id_hashes, kind="stable")
    ranked = id_hashes[order]
    for pos in np.flatnonzero(ranked[1:] == ranked[:-1]):
        first, second = sorted((int(order[pos]), int(order[pos + 1])))
        doc_id = docs[first].id
        if doc_id != docs[second].id:
            continue  # two ids with one 64-bit hash
        if first < base_count <= second:
            raise DataError(f"document id {doc_id!r} is already in the index {base} (row {first}): "
                            "give new ids to the documents you add")
        raise DuplicateIdError(f"duplicate document id {doc_id!r} in the corpus (documents {first} and {second})",
                               doc_id, (first, second))


EXTENDABLE = ("flat", "ivf", "hnsw")  # FAISS kinds --add extends in place; other stores are rebuilt


def _vector_index(params: dict[str, Any], shards: Sequence[np.ndarray], folder: Path,
                  base: Path | None = None) -> dict[str, Any]:
    """The one place the vector store is made (:mod:`tandem.index.vectors`): the ``base`` index's store
    extended, or a new one (IVF kinds trained on the first vectors, up to 256 a list, as FAISS samples), filled
    with the memory-mapped shard vectors block by block and saved into ``folder``; returns the
    parameters to record."""
    total = sum(len(s) for s in shards)
    if base is not None:
        if params.get("store", "faiss") != "faiss" or params.get("faiss") not in EXTENDABLE:
            kind = params.get("faiss") or params.get("store")
            raise ConfigError(f"index {base} keeps its vectors in a {kind!r} store, which --add cannot extend "
                              f"(it can: faiss {', '.join(EXTENDABLE)}): rebuild the index with the new documents")
        store: VectorStore = open_store(base, params)
    else:
        trains = params.get("store", "faiss") == "faiss" and params.get("faiss") in ("ivf", "ivfpq")
        if trains and not params.get("nlist"):
            params = {**params, "nlist": default_nlist(total)}
        store = new_store(params, shards[0].shape[1], folder)
        if trains:  # IVF learns its lists (and PQ its codes) from a sample; flat, HNSW and Qdrant need none
            sample = min(total, 256 * params["nlist"])
            picked = training_rows(params, sample)  # IVF-PQ: only train_size of them are read
            store.train(np.concatenate(list(_rows(shards, 0, sample))) if picked is None else _take(shards, picked))
    for block in _rows(shards, 0, total):
        store.add(block)
    store.save(folder)
    return dict(getattr(store, "params", params))


def _rows(shards: Sequence[np.ndarray], start: int, stop: int) -> Iterator[np.ndarray]:
    """Rows ``start:stop`` of the shards taken end to end, one contiguous float32 block per shard."""
    offset = 0
    for s in shards:
        lo, hi = max(start - offset, 0), min(stop - offset, len(s))
        if lo < hi:
            yield np.ascontiguousarray(s[lo:hi], dtype=np.float32)
        offset += len(s)


def _take(shards: Sequence[np.ndarray], rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` (ascending) of the shards taken end to end, as one float32 array; a memory-mapped
    shard reads only those rows."""
    parts, offset = [], 0
    for s in shards:
        lo, hi = np.searchsorted(rows, [offset, offset + len(s)])
        if lo < hi:
            parts.append(np.asarray(s[rows[lo:hi] - offset], dtype=np.float32))
        offset += len(s)
    return np.concatenate(parts)


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
