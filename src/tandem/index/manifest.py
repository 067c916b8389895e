"""The manifest every index folder carries: what built it, over which corpus, with which settings."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tandem.errors import IndexError_, IndexMismatchError
from tandem.io import write_json_atomic
from tandem.types import Document
from tandem.version import __version__

FORMAT_VERSION = 1
MANIFEST = "manifest.json"


def corpus_hasher() -> Any:
    """A hash object for :func:`update_corpus_hash` (a corpus hashed in parts equals :func:`corpus_hash`)."""
    return hashlib.sha256()


def update_corpus_hash(h: Any, docs: Iterable[Document]) -> None:
    """Feed the next documents of a corpus into ``h``."""
    for d in docs:
        for part in (d.id, d.title, d.text):
            h.update(part.encode("utf-8"))
            h.update(b"\x00")
        h.update(b"\x01")


def corpus_hash(docs: Iterable[Document]) -> str:
    """sha256 over the ordered (id, title, text) of every document."""
    h = corpus_hasher()
    update_corpus_hash(h, docs)
    return h.hexdigest()


@dataclass
class Manifest:
    """Describes one index folder; written last, so a folder without it is not an index."""

    kind: str
    components: list[str]
    doc_count: int
    corpus_hash: str
    encoder: str | None = None
    encoder_backend: str | None = None
    dim: int | None = None
    pooling: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    extras: dict[str, dict[str, Any]] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION
    tandem_version: str = __version__

    def save(self, folder: Path) -> None:
        """Write the manifest into the index folder, atomically."""
        write_json_atomic(folder / MANIFEST, asdict(self))

    @classmethod
    def load(cls, folder: str | Path) -> Manifest:
        """The manifest of the index in ``folder``; a clear error where there is no index or it is damaged."""
        path = Path(folder) / MANIFEST
        if not path.exists():
            raise IndexError_(f"cannot load index {folder}: {_not_an_index(Path(folder))}")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            manifest = cls(**data)
        except (ValueError, TypeError) as exc:  # malformed JSON or UTF-8, unknown or missing keys
            raise IndexError_(f"cannot load index {folder}: unreadable {MANIFEST} ({exc})") from exc
        if manifest.format_version != FORMAT_VERSION:
            raise IndexError_(
                f"index {folder} has format version {manifest.format_version}; this tandem reads {FORMAT_VERSION}: rebuild it"
            )
        return manifest

    def check(self, *, encoder: str | None = None, corpus: str | None = None, folder: str = "") -> None:
        """Raise IndexMismatchError if the index was built with another encoder or over another corpus."""
        if encoder is not None and self.encoder is not None and encoder != self.encoder:
            raise IndexMismatchError(
                f"index {folder} was built with encoder {self.encoder!r}, not {encoder!r}: rebuild it or use its encoder"
            )
        if corpus is not None and corpus != self.corpus_hash:
            raise IndexMismatchError(
                f"index {folder} was built over a different corpus ({self.doc_count} documents, hash "
                f"{self.corpus_hash[:12]}, requested {corpus[:12]}): rebuild it over this corpus"
            )


def _not_an_index(folder: Path) -> str:
    """Why ``folder`` is no index, with the command that makes one where it holds documents."""
    from tandem.corpus.files import readable_suffixes

    build = f"to search it, build an index of it first: tandem index --corpus {folder} --out INDEX"
    if not folder.exists():
        return "no such folder"
    if folder.is_file():
        return f"a file, not an index folder; {build}"
    suffixes = readable_suffixes()
    if any(p.suffix.lower() in suffixes for p in itertools.islice(folder.rglob("*"), 10_000)):
        return f"no {MANIFEST}: a folder of documents, not an index; {build}"
    return f"no {MANIFEST} (not an index, or its build did not finish)"
