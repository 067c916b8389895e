"""Write and read a CRAB bench folder.

Layout (the folder is built beside its target and renamed into place, so a killed build never
leaves a folder that loads; ``manifest.json`` is written last)::

    bench/
      manifest.json            settings, counts, variants, store names, invariant check
      labels.jsonl             per selected question: relevant and hard-negative passage ids
      clients/client-<i>/{train,dev,test}.jsonl   questions (gold_doc_ids = relevant ids)
      stores/<name>/           an index folder (docs.jsonl + dense FAISS over the frozen encoder)

The passage index is never re-encoded during training (query-side fine-tuning only), so the
stores are indexed once here with the base encoder.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from tandem.errors import ConfigError, DataError
from tandem.federated.bench import (
    VARIANTS,
    ClientSplit,
    Labels,
    check_bench,
    label_passages,
    make_stores,
    split_clients,
)
from tandem.io import read_jsonl, write_json_atomic, write_jsonl_atomic
from tandem.types import Document, OnProgress, Question

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
SPLITS = ("train", "dev", "test")


class _CachedEncoder:
    """Encoder protocol over vectors computed once for the whole pool (stores overlap a lot)."""

    def __init__(self, inner: Any, docs: Sequence[Document], batch_size: int, on_progress: OnProgress | None) -> None:
        self.name, self.dim, self.pooling = inner.name, inner.dim, inner.pooling
        self.backend = getattr(inner, "backend", None)
        self._inner = inner
        vecs = inner.encode([d.contents for d in docs], batch_size=batch_size, on_progress=on_progress)
        self._by_text = {d.contents: v for d, v in zip(docs, vecs, strict=True)}

    def encode(self, texts: Sequence[str], *, batch_size: int = 64,
               on_progress: OnProgress | None = None) -> np.ndarray:
        """The pool's vectors; texts outside the pool are encoded (and kept) now."""
        missing = [t for t in texts if t not in self._by_text]
        if missing:
            for t, v in zip(missing, self._inner.encode(missing, batch_size=batch_size), strict=True):
                self._by_text[t] = v
        return np.stack([self._by_text[t] for t in texts]).astype(np.float32) if texts else np.zeros((0, self.dim), np.float32)


def build_bench(dataset: str | Path, out: str | Path, *, clients: int = 8, shots: Sequence[int] = (16, 32, 64),
                dev: int = 25, test: int = 25, train_frac: float = 0.8, test_frac: float = 0.025,
                split_frac: float = 0.1, rel_top: int = 5, encoder: str | Any = "minilm", seed: int = 0,
                fmt: str | None = None, on_progress: OnProgress | None = None) -> dict[str, Any]:
    """Build a CRAB bench folder from ``dataset`` into ``out``; returns the manifest.

    ``encoder``: the frozen passage encoder, a name (loaded with sentence-transformers, the same code
    the trainable query encoder uses) or an Encoder object. ``on_progress(done, total)`` follows the
    encoding of the pool's passages.
    """
    from tandem.corpus import load_dataset
    from tandem.index import build_index
    from tandem.index.encoder import load_encoder
    from tandem.outdir import atomic_dir

    shots = sorted({int(s) for s in shots})
    if not shots or shots[0] < 1:
        raise ConfigError(f"shots must be positive integers, got {shots}")
    ds = load_dataset(dataset, format=fmt)
    with_gold = [q for q in ds.questions if q.gold_doc_ids]
    if not with_gold:
        raise DataError(f"{dataset}: no question has gold passages; CRAB needs a QA set with gold passages")
    labels = label_passages(with_gold, ds.passages, rel_top=rel_top)
    splits = split_clients(with_gold, labels, clients=clients, shots=shots[-1], dev=dev, test=test, seed=seed)
    stores = make_stores(splits, labels, [d.id for d in ds.passages], train_frac=train_frac, test_frac=test_frac,
                         split_frac=split_frac, seed=seed)
    counts = check_bench(splits, labels, stores)
    with atomic_dir(out, "crab-bench") as tmp:
        selected = [q for s in splits for q in s.train + s.dev + s.test]
        write_jsonl_atomic(tmp / "labels.jsonl", ({"id": q.id, **asdict(labels[q.id])} for q in selected))
        for s in splits:
            for name in SPLITS:
                write_jsonl_atomic(tmp / "clients" / f"client-{s.client}" / f"{name}.jsonl",
                                   (_question_record(q, labels[q.id]) for q in getattr(s, name)))
        by_id = {d.id: d for d in ds.passages}
        used = list(dict.fromkeys(p for ids in stores.stores.values() for p in ids))
        base = load_encoder(encoder, backend="st") if isinstance(encoder, str) else encoder
        enc = _CachedEncoder(base, [by_id[p] for p in used], 64, on_progress)
        for name, ids in stores.stores.items():
            build_index([by_id[p] for p in ids], tmp / "stores" / name, kind="dense", encoder=enc)
        train_qs = [q for s in splits for q in s.train]
        manifest = {
            "format_version": FORMAT_VERSION, "source": str(dataset), "source_format": ds.format,
            "clients": clients, "shots": shots, "dev": dev, "test": test, "seed": seed, "encoder": base.name,
            "fractions": {"train": train_frac, "test": test_frac, "split": split_frac}, "rel_top": rel_top,
            "pool_passages": len(ds.passages), "variants": stores.variants, "central": stores.central,
            "test_stores": stores.test, "store_sizes": counts,
            "hard_negatives_per_train_question": {n: _mean_present(train_qs, labels, set(ids)) for n, ids in stores.stores.items()},
            "invariants": "checked",
        }
        write_json_atomic(tmp / MANIFEST, manifest)
    return manifest


def _mean_present(questions: Sequence[Question], labels: dict[str, Labels], store: set[str]) -> float:
    """Mean number of a training question's own hard negatives present in a store."""
    return round(sum(len(store & set(labels[q.id].hard_negatives)) for q in questions) / max(1, len(questions)), 1)


def _question_record(q: Question, labels: Labels) -> dict[str, Any]:
    return {"id": q.id, "question": q.text, "golden_answers": list(q.answers), "gold_doc_ids": list(labels.relevant),
            "hard_negative_ids": list(labels.hard_negatives)}


class Bench:
    """A built bench folder: its manifest, client question sets and store indexes."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        path = self.folder / MANIFEST
        if not path.is_file():
            raise DataError(f"not a bench folder (no {MANIFEST}); build one with `tandem federate build-bench`", str(self.folder))
        self.manifest: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        if self.manifest.get("format_version") != FORMAT_VERSION:
            raise DataError(f"bench format {self.manifest.get('format_version')} != {FORMAT_VERSION}", str(path))

    @property
    def clients(self) -> int:
        return int(self.manifest["clients"])

    def questions(self, client: int, split: str, shots: int | None = None, limit: int | None = None) -> list[Question]:
        """Questions of ``client``'s ``split``; ``shots`` takes the k-shot prefix of train."""
        if split not in SPLITS:
            raise ConfigError(f"unknown split {split!r}; splits: {sorted(SPLITS)}")
        if not 0 <= client < self.clients:
            raise ConfigError(f"client {client} out of range: the bench has {self.clients} clients")
        if split == "train" and shots is not None and shots > max(self.manifest["shots"]):
            raise ConfigError(f"{shots}-shot asked; the bench has at most {max(self.manifest['shots'])} training pairs per client")
        out = []
        for _, rec in read_jsonl(self.folder / "clients" / f"client-{client}" / f"{split}.jsonl"):
            out.append(Question(rec["id"], rec["question"], tuple(rec["golden_answers"]), tuple(rec["gold_doc_ids"]),
                                {"hard_negative_ids": rec.get("hard_negative_ids", [])}))
        cap = shots if split == "train" else limit
        return out[:cap] if cap is not None else out

    def train_store(self, variant: str, client: int | None) -> str:
        """Store name client ``client`` trains with under ``variant`` (None: the centralized store)."""
        if variant not in self.manifest["variants"]:
            if variant in VARIANTS:
                raise ConfigError(f"bench {self.folder} was built without the {variant} store (it has "
                                  f"{sorted(self.manifest['variants'])}): build it again with `tandem federate build-bench`")
            raise ConfigError(f"unknown store variant {variant!r}; variants: {sorted(VARIANTS)}")
        return self.manifest["central"][variant] if client is None else self.manifest["variants"][variant][client]

    def test_store(self, client: int) -> str:
        return str(self.manifest["test_stores"][client])

    def store_path(self, name: str) -> Path:
        path = self.folder / "stores" / name
        if not path.is_dir():
            raise DataError(f"bench has no store {name!r}", str(self.folder))
        return path


def splits_from(bench: Bench) -> list[ClientSplit]:
    """The client splits of a built bench (for re-checking invariants)."""
    return [ClientSplit(i, bench.questions(i, "train"), bench.questions(i, "dev"), bench.questions(i, "test"))
            for i in range(bench.clients)]
