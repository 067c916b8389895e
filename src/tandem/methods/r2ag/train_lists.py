"""R²AG's training examples: one ranked list per question (its documents sorted by r, the list features
of methods.md §2.2 and gold labels), and a cache of them.

Building the lists of a 1,000-question training run reads each question's documents, retrieves its
distractors and encodes all of them: ~10-25 minutes on a 2-core CPU, paid again each time a long training
run resumes. :func:`cached_lists` keeps them under tandem's cache root (``r2ag-lists/``), keyed by everything
they are made from (the dataset and index files' sizes and times, the questions, k, features, the encoder,
the code that ranks and featurizes); a cache file that cannot be read is built again. (Named ``train_*`` so
that it is not part of R²AG's answering code: :data:`tandem.eval.codecheck.TRAINING`.)
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tandem.errors import WriteError
from tandem.index.encoder import Encoder
from tandem.index.store import DocStore
from tandem.io import atomic_open
from tandem.methods.base import Search
from tandem.methods.r2ag.algorithm import rank_and_featurize
from tandem.model_files import cache_root
from tandem.outdir import file_record, file_records
from tandem.types import Document, OnProgress, Question

LISTS_VERSION = 1  # raise when what the lists are made of changes outside CODE_FILES
CODE_FILES = ("train_lists.py", "algorithm.py", "former.py")  # rank, featurize, label: in the cache key


@dataclass
class RankedList:
    """One training/validation question: its relevance-sorted documents, features and gold labels."""

    qid: str
    question: str
    answer: str
    docs: list[Document]
    feats: np.ndarray
    labels: np.ndarray


def build_lists(questions: Sequence[Question], store: DocStore, encoder: Encoder, *, k: int = 10,
                search: Search | None = None, drop: Sequence[str] = (), gamma_first: float = 1.0,
                on_progress: OnProgress | None = None) -> list[RankedList]:
    """Ranked lists for questions with gold answers: the question's own context paragraphs
    (``metadata['context_ids']``, gold ones first), topped up to k with retrieved distractors when
    ``search`` is given (e.g. NQ-open oracle: 1 gold + 9 retrieved); then sorted by r.
    ``on_progress(done, total)`` after each question."""
    out = []
    for done, q in enumerate(questions, 1):
        if on_progress is not None:
            on_progress(done, len(questions))
        if not q.answers:
            continue
        ids = [d for d in q.gold_doc_ids if d in store]
        ids += [d for d in q.metadata.get("context_ids", []) if d in store and d not in ids]
        ids = ids[:k]
        if search is not None and len(ids) < k:
            _, found = search(q.text, k + len(ids))
            ids += [d.id for d in found if d.id not in ids][: k - len(ids)]
        if not ids:
            continue
        docs, feats, _ = rank_and_featurize(encoder, q.text, [store.get(d) for d in ids], drop=drop, gamma_first=gamma_first)
        labels = np.array([float(d.id in q.gold_doc_ids) for d in docs], dtype=np.float32)
        out.append(RankedList(q.id, q.text, q.answers[0], docs, feats, labels))
    return out


def files_identity(path: str | Path) -> list[Any]:
    """A file's or folder's identity for a cache key: each file's name, size and SHA-256 of its content
    (:func:`tandem.outdir.file_records`; a folder's marker left out). Content, not modification times: a
    data folder mounted or copied afresh keeps its identity, and the same files at another path do too."""
    p = Path(path).resolve()
    if p.is_file():
        return [[p.name, *file_record(p)]]
    return [[rel, *record] for rel, record in file_records(p).items()]


def lists_key(**inputs: Any) -> str:
    """The cache key of the ranked lists made from ``inputs`` (JSON-serialisable) by this code: the files
    that rank and featurize them are part of the key, so a change there builds the lists again."""
    here = Path(__file__).parent
    code = hashlib.sha256(b"".join((here / name).read_bytes() for name in CODE_FILES)).hexdigest()[:16]
    raw = json.dumps({"version": LISTS_VERSION, "code": code, **inputs}, sort_keys=True, default=str)
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:24]


def cached_lists(key: str, questions: Sequence[Question], store: DocStore,
                 build: Callable[[], list[RankedList]], *, root: Path | None = None) -> list[RankedList]:
    """The lists stored under ``key`` (questions and documents read back from ``questions`` and ``store``),
    else ``build()``'s, stored for the next run. A damaged or stale file is built again."""
    path = (root if root is not None else cache_root("r2ag-lists")) / f"{key}.json.gz"
    by_id = {q.id: q for q in questions}
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            rows = json.load(f)
        return [RankedList(r["qid"], by_id[r["qid"]].text, r["answer"], [store.get(d) for d in r["ids"]],
                           np.asarray(r["feats"], dtype=np.float32), np.asarray(r["labels"], dtype=np.float32))
                for r in rows]
    except (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError):
        pass  # no cache yet, or one that cannot be read: build the lists
    lists = build()
    rows = [{"qid": x.qid, "answer": x.answer, "ids": [d.id for d in x.docs], "feats": x.feats.tolist(),
             "labels": x.labels.tolist()} for x in lists]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(path, "wb", encoding=None) as raw, gzip.open(raw, "wt", encoding="utf-8") as f:
            json.dump(rows, f)
    except (OSError, WriteError):
        pass  # a cache that cannot be written (full disk, read-only home) only costs the next run the build
    return lists
