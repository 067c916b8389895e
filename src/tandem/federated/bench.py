"""CRAB-style benchmark builder (CoRAG paper §3.1, §3.4; methods.md §4.2, §4.4): pure functions.

From a QA set whose questions carry gold passages (NQ-open oracle, or any supported format) and its
passage pool:

1. **Labels** (``label_passages``): BM25 over the pool with question + answer as the query.
   *relevant* = the dataset's gold passages plus the top-``rel_top`` hits that contain an answer;
   *hard negatives* = ranks 6–50 that are not relevant; everything else is *irrelevant*.
2. **Splits** (``split_clients``): questions shuffled; each of N clients gets ``max(shots)`` training
   pairs (k-shot sets are prefixes, so 16 ⊂ 32 ⊂ 64), then dev and test questions, taking only
   questions whose relevant passages share nothing with any training question's.
3. **Stores** (``make_stores``): the background B = pool minus every selected question's relevant
   passages, shuffled. ``train_frac`` of B (the paper's "80% of Wikipedia") is the training
   background B_tr; per-client test stores take disjoint ``test_frac`` slices of the rest.
   Training-store variants map each client to a store:

   - ``REL``   every client: all clients' training-relevant passages + B_tr (one shared store);
   - ``IRR``   every client: B_tr only;
   - ``REL-1`` client 0: B_tr + all relevant passages; the others: B_tr;
   - ``SPLIT`` client i: its own relevant passages + a disjoint ``split_frac`` slice of B.

   The paper's Table 2 compositions (``COMPOSITIONS``; one store shared by every client). With HN the
   training questions' hard negatives inside B_tr and IRR-only = B_tr without them:

   - ``REL-ONLY`` the training-relevant passages alone;
   - ``HN+IRR``   B_tr (= ``IRR``: hard negatives + irrelevant passages, no relevant one);
   - ``REL+HN``   the relevant passages + HN;
   - ``REL+IRR``  the relevant passages + IRR-only;
   - ``TOP1+IRR`` each training question's top-1 relevant passage + IRR-only.

   Test store i = client i's dev + test relevant passages + its background slice; it shares no
   passage with any training store.

``check_bench`` verifies those invariants and raises ``DataError`` naming the first violation.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tandem.errors import ConfigError, DataError
from tandem.eval.qa_metrics import normalize_answer
from tandem.types import Document, Question

COMPOSITIONS = ("REL-ONLY", "HN+IRR", "REL+HN", "REL+IRR", "TOP1+IRR")  # the paper's Table 2
VARIANTS = ("REL", "IRR", "REL-1", "SPLIT", *COMPOSITIONS)
HARD_NEGATIVE_RANKS = (6, 50)


@dataclass(frozen=True)
class Labels:
    """Passage labels of one question: relevant ids (best first) and hard-negative ids."""

    relevant: tuple[str, ...]
    hard_negatives: tuple[str, ...]


@dataclass
class ClientSplit:
    """One client's questions: ``train`` in k-shot order (the first k are the k-shot set), dev, test."""

    client: int
    train: list[Question] = field(default_factory=list)
    dev: list[Question] = field(default_factory=list)
    test: list[Question] = field(default_factory=list)


@dataclass
class Stores:
    """Passage ids of every named store and which store each client uses per variant."""

    stores: dict[str, list[str]]
    variants: dict[str, list[str]]  # variant -> store name per client
    central: dict[str, str]  # variant -> store holding the union of its clients' stores
    test: list[str]  # store name of each client's test store


def contains_answer(text: str, answers: Sequence[str]) -> bool:
    """True if a normalised answer occurs in the normalised text as whole words."""
    norm = f" {normalize_answer(text)} "
    return any(a.strip() and f" {normalize_answer(a)} " in norm for a in answers if normalize_answer(a))


def label_passages(questions: Sequence[Question], pool: Sequence[Document], *, rel_top: int = 5,
                   hard_ranks: tuple[int, int] = HARD_NEGATIVE_RANKS) -> dict[str, Labels]:
    """Label the pool for each question with BM25 (question + first answer as the query).

    Relevant: the question's gold passages, then the top-``rel_top`` BM25 hits containing an answer.
    Hard negatives: BM25 ranks ``hard_ranks`` (1-based, inclusive) that are not relevant.
    """
    import bm25s

    from tandem.index.bm25 import DEFAULT_BM25, tokenize

    if not pool:
        raise DataError("the passage pool is empty: nothing to label")
    lo, hi = hard_ranks
    if not 1 <= lo <= hi:
        raise ConfigError(f"hard-negative ranks must satisfy 1 <= lo <= hi, got {hard_ranks}")
    model = bm25s.BM25(k1=DEFAULT_BM25["k1"], b=DEFAULT_BM25["b"], method=DEFAULT_BM25["method"])
    model.index(tokenize([d.contents for d in pool], DEFAULT_BM25), show_progress=False)
    depth = min(hi, len(pool))
    queries = [f"{q.text} {q.answers[0] if q.answers else ''}" for q in questions]
    results, _ = model.retrieve(tokenize(queries, DEFAULT_BM25), k=depth, show_progress=False, n_threads=1)
    known = {d.id for d in pool}
    out: dict[str, Labels] = {}
    for q, row in zip(questions, results, strict=True):
        ranked = [pool[int(i)] for i in row]
        hits = [d.id for d in ranked[:rel_top] if contains_answer(d.contents, q.answers)]
        relevant = tuple(dict.fromkeys([g for g in q.gold_doc_ids if g in known] + hits))
        hard = tuple(d.id for d in ranked[lo - 1:hi] if d.id not in relevant)
        out[q.id] = Labels(relevant, hard)
    return out


def split_clients(questions: Sequence[Question], labels: dict[str, Labels], *, clients: int, shots: int,
                  dev: int, test: int, seed: int = 0) -> list[ClientSplit]:
    """IID split into ``clients`` clients of ``shots`` train, ``dev`` dev and ``test`` test questions.

    Only questions with an answer and at least one relevant passage are used. Dev/test questions
    whose relevant passages overlap any training question's are skipped, so test stores can hold
    their relevant passages without sharing anything with a training store.
    """
    if clients < 1 or shots < 1 or dev < 0 or test < 1:
        raise ConfigError(f"need clients >= 1, shots >= 1, dev >= 0, test >= 1; got {clients}, {shots}, {dev}, {test}")
    usable = [q for q in questions if q.answers and labels.get(q.id) and labels[q.id].relevant]
    random.Random(seed).shuffle(usable)
    n_train = clients * shots
    if len(usable) < n_train:
        raise DataError(f"{len(usable)} usable questions, {clients} clients x {shots} shots need {n_train}")
    splits = [ClientSplit(i) for i in range(clients)]
    for j, q in enumerate(usable[:n_train]):
        splits[j % clients].train.append(q)
    train_rel = {p for q in usable[:n_train] for p in labels[q.id].relevant}
    held = [q for q in usable[n_train:] if not train_rel & set(labels[q.id].relevant)]
    need = clients * (dev + test)
    if len(held) < need:
        raise DataError(f"only {len(held)} questions are usable for dev/test (relevant passages disjoint from "
                        f"training ones); {clients} clients x ({dev} dev + {test} test) need {need}")
    for j, q in enumerate(held[:clients * test]):
        splits[j % clients].test.append(q)
    for j, q in enumerate(held[clients * test:need]):
        splits[j % clients].dev.append(q)
    return splits


def _relevant(questions: Sequence[Question], labels: dict[str, Labels]) -> list[str]:
    return list(dict.fromkeys(p for q in questions for p in labels[q.id].relevant))


def make_stores(splits: Sequence[ClientSplit], labels: dict[str, Labels], pool_ids: Sequence[str], *,
                train_frac: float = 0.8, test_frac: float = 0.025, split_frac: float = 0.1,
                seed: int = 0) -> Stores:
    """Build every named store and the variant -> per-client store maps (see the module docstring)."""
    n = len(splits)
    if not 0 < train_frac < 1:
        raise ConfigError(f"train_frac must be in (0, 1), got {train_frac}")
    if n * test_frac > 1 - train_frac + 1e-9:
        raise ConfigError(f"{n} test slices of {test_frac} do not fit in the held-out {1 - train_frac:.3f} of the background")
    if n * split_frac > train_frac + 1e-9:
        raise ConfigError(f"{n} SPLIT slices of {split_frac} do not fit in the training background ({train_frac} of it)")
    train_rel = [_relevant(s.train, labels) for s in splits]
    held_rel = [_relevant(s.dev + s.test, labels) for s in splits]
    selected = {p for ids in train_rel + held_rel for p in ids}
    background = [p for p in dict.fromkeys(pool_ids) if p not in selected]
    random.Random(seed).shuffle(background)
    n_bg = len(background)
    cut = int(round(train_frac * n_bg))
    b_train, b_held = background[:cut], background[cut:]
    per_test = int(round(test_frac * n_bg))
    per_split = int(round(split_frac * n_bg))
    all_rel = list(dict.fromkeys(p for ids in train_rel for p in ids))
    hard = {p for s in splits for q in s.train for p in labels[q.id].hard_negatives}
    b_hard, b_irr = [p for p in b_train if p in hard], [p for p in b_train if p not in hard]
    top1 = list(dict.fromkeys(labels[q.id].relevant[0] for s in splits for q in s.train))
    stores: dict[str, list[str]] = {"rel": all_rel + b_train, "irr": list(b_train), "rel-only": list(all_rel),
                                    "rel+hn": all_rel + b_hard, "rel+irr": all_rel + b_irr, "top1+irr": top1 + b_irr}
    for i in range(n):
        # SPLIT slices come from B_tr first (the paper's 10% slices of the 80%), then the rest of B_tr
        stores[f"split-{i}"] = train_rel[i] + b_train[i * per_split:(i + 1) * per_split]
        stores[f"test-{i}"] = held_rel[i] + b_held[i * per_test:(i + 1) * per_test]
    variants = {
        "REL": ["rel"] * n,
        "IRR": ["irr"] * n,
        "REL-1": ["rel"] + ["irr"] * (n - 1),
        "SPLIT": [f"split-{i}" for i in range(n)],
        "REL-ONLY": ["rel-only"] * n, "HN+IRR": ["irr"] * n, "REL+HN": ["rel+hn"] * n, "REL+IRR": ["rel+irr"] * n,
        "TOP1+IRR": ["top1+irr"] * n,
    }
    central = {}
    for name, assigned in variants.items():
        union = set().union(*(stores[s] for s in assigned))
        match = [s for s in (*dict.fromkeys(assigned), "rel", "irr") if set(stores[s]) == union]
        central[name] = match[0] if match else _add_union(stores, name, union)
    return Stores(stores, variants, central, [f"test-{i}" for i in range(n)])


def _add_union(stores: dict[str, list[str]], variant: str, union: set[str]) -> str:
    name = f"union-{variant.lower()}"
    order = [p for s in stores.values() for p in s]
    stores[name] = [p for p in dict.fromkeys(order) if p in union]
    return name


def _check_compositions(splits: Sequence[ClientSplit], labels: dict[str, Labels], stores: Stores,
                        all_rel: set[str]) -> None:
    """Table 2's stores hold what their names say (relevant / hard-negative / irrelevant passages)."""
    hard = {p for s in splits for q in s.train for p in labels[q.id].hard_negatives} - all_rel
    top1 = {labels[q.id].relevant[0] for s in splits for q in s.train}
    store = {v: set(stores.stores[stores.variants[v][0]]) for v in COMPOSITIONS}
    if store["REL-ONLY"] != all_rel:
        raise DataError("REL-ONLY must hold the training-relevant passages and nothing else")
    if not all_rel <= store["REL+HN"] or store["REL+HN"] - all_rel - hard:
        raise DataError("REL+HN must hold every relevant passage and, besides them, hard negatives only")
    if not all_rel <= store["REL+IRR"] or store["REL+IRR"] & hard:
        raise DataError("REL+IRR must hold every relevant passage and no hard negative")
    if store["TOP1+IRR"] & all_rel != top1 or store["TOP1+IRR"] & hard:
        raise DataError("TOP1+IRR must hold each training question's top-1 relevant passage only, and no hard negative")
    if store["HN+IRR"] & all_rel:
        raise DataError("HN+IRR must hold no relevant passage")


def check_bench(splits: Sequence[ClientSplit], labels: dict[str, Labels], stores: Stores) -> dict[str, Any]:
    """Check the CRAB invariants; raise ``DataError`` on the first violation, else return counts."""
    train_names = {s for assigned in stores.variants.values() for s in assigned} | set(stores.central.values())
    train_union = set().union(*(stores.stores[s] for s in train_names))
    for i, s in enumerate(splits):
        leak = train_union & set(stores.stores[stores.test[i]])
        if leak:
            raise DataError(f"test store of client {i} shares {len(leak)} passages with a training store, e.g. {sorted(leak)[0]}")
        for q in s.dev + s.test:
            missing = set(labels[q.id].relevant) - set(stores.stores[stores.test[i]])
            if missing:
                raise DataError(f"client {i} question {q.id}: relevant passages missing from its test store")
    ids_train = [q.id for s in splits for q in s.train]
    ids_held = [q.id for s in splits for q in s.dev + s.test]
    if len(set(ids_train + ids_held)) != len(ids_train) + len(ids_held):
        raise DataError("a question appears twice across clients/splits")
    all_rel = {p for s in splits for q in s.train for p in labels[q.id].relevant}
    rel1 = stores.variants["REL-1"]
    if not all_rel <= set(stores.stores[rel1[0]]) or any(all_rel & set(stores.stores[x]) for x in rel1[1:]):
        raise DataError("REL-1 must give every relevant passage to client 0 and none to the others")
    if any(all_rel & set(stores.stores[x]) for x in stores.variants["IRR"]):
        raise DataError("IRR stores must hold no relevant passage")
    for i, s in enumerate(splits):
        own = {p for q in s.train for p in labels[q.id].relevant}
        if not own <= set(stores.stores[stores.variants["SPLIT"][i]]):
            raise DataError(f"SPLIT store of client {i} lacks some of its own relevant passages")
    _check_compositions(splits, labels, stores, all_rel)
    return {name: len(ids) for name, ids in stores.stores.items()}
