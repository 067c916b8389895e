"""Graph retrieval (personalized PageRank over the passage graph) against bm25 / dense / hybrid.

Modes, each printing JSON:

    # settings chosen by 5-fold cross-validation over folds mixing every set; held-out figures
    python benchmarks/graph_retrieval.py cv --work indexes/bench-graph > runs/graph-cv.json
    # ranker variants (features, depth, LightGBM settings, first stage) on held-out folds, candidates computed once
    python benchmarks/graph_retrieval.py ablate --fold-settings runs/graph-cv.json --variant v1 '{}' > runs/graph-ablate.json
    # figures on every set, per fold: R@2/5/10, all-gold@5, MRR, nDCG@10, build time, graph size, query p50/p95
    python benchmarks/graph_retrieval.py report --work indexes/bench-graph > runs/graph-report.json
    # dev500 questions over larger pools (other sets' passages added; a 50 k pool of their windows): recall, latency
    python benchmarks/graph_retrieval.py pools --work indexes/bench-graph > runs/graph-pools.json
    # query latency alone (run it on a quiet machine; --clock cpu times process CPU time)
    python benchmarks/graph_retrieval.py latency --sets hotpotqa --work indexes/bench-graph
    # gold-document recall of tandem eval qa runs, over the questions all of them have done
    python benchmarks/graph_retrieval.py methods --runs runs/m-cooprag-hybrid runs/m-cooprag-graph

``--work`` holds one hybrid + graph index per set, built once and reused (``--rebuild`` to time the
builds again). Sets: ``hotpotqa`` (dev500 pool; figures also for 0-249 (the bridge questions) and
250-499 (the comparison questions)), ``musique`` (MuSiQue-100 with its corpus) and ``fixtures`` (the
2WikiMultihopQA, HotpotQA and MuSiQue examples of ../shared/data/fixtures in their original formats, one pool,
30 questions).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tandem.corpus import load_dataset
from tandem.corpus.chunking import chunk_text
from tandem.eval.retrieval import evaluate_retrieval, latency_ms
from tandem.index import add_extras, build_index, open_index
from tandem.index.encoder import load_encoder
from tandem.index.passage_graph import DEFAULT_GRAPH, GraphExtra
from tandem.model_files import offline_env
from tandem.retrieve import open_retriever
from tandem.retrieve.dense import DenseRetriever
from tandem.retrieve.graph import GraphRetriever, GraphStageSettings
from tandem.types import Document, Hit, Question, doc_id_for

sys.path.insert(0, str(Path(__file__).resolve().parent))  # ranker training: research code beside this script
from ranker_training import BAG, ROUNDS, candidate_groups, save_ranker, train_ranker, training_groups  # noqa: E402

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SETS = {
    "hotpotqa": [SHARED / "hotpotqa/dev500.jsonl"],
    "musique": [SHARED / "musique/hipporag_100.json"],
    "fixtures": [SHARED / "fixtures/wiki_example.jsonl", SHARED / "fixtures/hotpot_example.jsonl",
                 SHARED / "fixtures/musique_example.jsonl"],
}
# larger pools for the dev500 questions: dev500's passages plus every other local set's (about 9.6 k)
POOLS = {"pool-mixed": [*SETS["hotpotqa"], SHARED / "musique/hipporag_100.json", SHARED / "nq/nq-open-oracle.jsonl.gz",
                        *SETS["fixtures"]]}
# a 50 k-passage scale pool for the same questions, built at run time from the real local passages: the
# mixed pool plus 32-word windows (16 words of overlap; tandem.corpus.chunking.chunk_text) cut from each
# of its passages that is not a dev500 gold passage, titled as their source (a chunked corpus: many
# passages share a title). The windows are near-duplicate distractors, not new topics (docs/retrieval.md).
SCALE_POOLS = {"pool-50k": ("pool-mixed", 32, 16)}
METRICS = ("recall@2", "recall@5", "recall@10", "all_gold@5", "mrr", "ndcg@10")


def load_set(name: str) -> tuple[list[Question], list]:
    """Questions and passage pool of a set (several files: pools merged, duplicates by id dropped)."""
    if name in SCALE_POOLS:
        return scale_pool(*SCALE_POOLS[name])
    questions: list[Question] = []
    pool: dict[str, Any] = {}
    for path in SETS.get(name) or POOLS[name]:
        ds = load_dataset(path)
        questions += ds.questions
        for doc in ds.passages:
            pool.setdefault(doc.id, doc)
    return questions, list(pool.values())


def scale_pool(base: str, words: int, overlap: int) -> tuple[list[Question], list]:
    """``base``'s questions and pool, plus word windows cut from every pool passage that is no dev500
    question's gold passage (so a window never competes with the gold passage it was cut from)."""
    questions, pool = load_set(base)
    gold = {g for q in load_set("hotpotqa")[0] for g in q.gold_doc_ids}
    docs = {d.id: d for d in pool}
    for doc in pool:
        if doc.id in gold:
            continue
        for piece in chunk_text(doc.text, words, overlap):
            window = Document(doc_id_for(doc.title, piece), doc.title, piece, {"window_of": doc.id})
            docs.setdefault(window.id, window)
    return questions, list(docs.values())


def ensure_index(name: str, work: Path, rebuild: bool) -> tuple[Any, dict[str, float]]:
    """The set's hybrid index with the graph extra, and build times (hybrid; graph added on top)."""
    _, passages = load_set(name)
    folder = work / name
    times: dict[str, float] = {}
    if rebuild or not (folder / "manifest.json").exists():
        encoder = load_encoder("minilm")
        start = time.perf_counter()
        build_index(passages, folder, kind="hybrid", encoder=encoder)
        times["hybrid_build_s"] = round(time.perf_counter() - start, 2)
        start = time.perf_counter()
        add_extras(folder, [GraphExtra()])
        times["graph_add_s"] = round(time.perf_counter() - start, 2)
    return open_index(folder, corpus=passages), times


def scores(questions: Sequence[Question], retriever: Any) -> dict[str, float]:
    _, metrics = evaluate_retrieval(questions, retriever, (2, 5, 10))
    return {m: round(100 * metrics[m], 1) for m in METRICS}


def part_scores(questions: Sequence[Question], retriever: Any, parts: dict[str, slice]) -> dict[str, dict[str, float]]:
    """Metrics over each slice of the questions, from one retrieval run over all of them."""
    records, _ = evaluate_retrieval(questions, retriever, (2, 5, 10))
    by_id = {r["id"]: r["scores"] for r in records}
    out = {}
    for part, where in parts.items():
        rows = [by_id[q.id] for q in questions[where] if q.id in by_id]
        out[part] = {m: round(100 * sum(r[m] for r in rows) / len(rows), 1) for m in METRICS}
    return out


class Cached:
    """A first stage whose rankings are computed once per query (the settings search reuses them)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.memo = inner, inner.name, {}

    def search_batch(self, queries: Sequence[str], k: int = 10) -> list[list[Hit]]:
        todo = [q for q in queries if (q, k) not in self.memo]
        for q, hits in zip(todo, self.inner.search_batch(todo, k) if todo else [], strict=True):
            self.memo[(q, k)] = hits
        return [self.memo[(q, k)] for q in queries]

    def search(self, query: str, k: int = 10) -> list[Hit]:
        return self.search_batch([query], k)[0]


FOLDS = 5  # question i of every set is in fold i mod 5: each fold mixes datasets and question types
# the cross-validated search: question links, seeds and fusion weight as before, against the bridge
# expansion (expand_hits, expand_weight, hub_damping); damping, seed weighting, reverse_weight,
# entity_weight and graph_score stay where the first, wider search put them (docs/retrieval.md)
GRID = {  # a first 200-combination grid (seeds 3/5, fusion_weight 0.35/0.5, link_boost 0.1/0.2) chose
    "seeds": [3],  # seeds 3, fusion 0.5 and link_boost 0.2 on every fold: they are held here
    "fusion_weight": [0.5],
    "link_seeds": [1.0],
    "link_boost": [0.2],
    "expand": [(0, 0.0, 0.0, 0.0)] + [(m, w, h, r) for m in (2, 3, 5) for w in (0.2, 0.35, 0.5) for h in (0.0, 0.5)
                                      for r in (0.0, 0.5)],
}
# the defaults before the cross-validated search (chosen on dev500 questions 250-499), for comparison
ISSUE16 = {"expand_hits": 0, "expand_weight": 0.0, "hub_damping": 0.0, "ranker": "none"}
CV_SETS = ("hotpotqa", "musique", "fixtures")


def grid_settings() -> list[dict[str, Any]]:
    """Every GRID combination as graph retriever settings (the fused order: the ranker is trained on top)."""
    out = []
    for values in itertools.product(*GRID.values()):
        combo = dict(zip(GRID, values, strict=True))
        m, w, h, r = combo.pop("expand")
        out.append({**combo, "expand_hits": m, "expand_weight": w, "hub_damping": h, "expand_reverse": r,
                    "ranker": "none"})
    return out


def objective(per_set: dict[str, dict[str, float]]) -> float:
    """What the search maximises: (R@5 + R@2) / 2, averaged over the sets with equal weight."""
    return sum((m["recall@5"] + m["recall@2"]) / 2 for m in per_set.values()) / len(per_set)


def fold_means(records: dict[str, list[dict[str, float]]], folds: set[int]) -> dict[str, dict[str, float]]:
    """Per set, the mean of each metric over the questions whose position mod FOLDS is in ``folds``."""
    out = {}
    for name, rows in records.items():
        picked = [r for i, r in enumerate(rows) if i % FOLDS in folds]
        out[name] = {m: round(100 * sum(r[m] for r in picked) / len(picked), 1) for m in METRICS}
    return out


def cross_validate(work: Path, rebuild: bool, sets: Sequence[str] = CV_SETS, ranker: bool = False,
                   save_ranker_to: Path | None = None) -> dict[str, Any]:
    """Settings chosen by FOLDS-fold cross-validation over folds that mix the sets and question types:
    for each fold, the GRID combination with the best :func:`objective` on the other folds, scored on
    the held-out fold; the held-out records of all folds give each set's figures. ``final`` is the
    choice on all folds (the shipped defaults). With ``ranker``, each fold also trains the learned
    ranker on the other folds (over its chosen settings, each set weighted equally) and scores it on
    the held-out fold; ``save_ranker_to`` receives the model trained on all folds over ``final``."""
    data = {name: (load_set(name)[0], ensure_index(name, work, rebuild)[0]) for name in sets}
    firsts = {name: Cached(open_retriever(idx, idx.kind)) for name, (_, idx) in data.items()}
    combos = grid_settings()
    runs = []  # per combo: set -> per-question metric rows in question order
    for settings in combos:
        per_set = {}
        for name, (questions, idx) in data.items():
            records, _ = evaluate_retrieval(questions, GraphRetriever(idx, firsts[name], **settings), (2, 5, 10))
            per_set[name] = [r["scores"] for r in records]
        runs.append(per_set)
    everything = set(range(FOLDS))
    folds, held = [], {name: [None] * len(runs[0][name]) for name in sets}
    for fold in range(FOLDS):
        best = max(range(len(combos)), key=lambda c: objective(fold_means(runs[c], everything - {fold})))
        for name in sets:
            for i, row in enumerate(runs[best][name]):
                if i % FOLDS == fold:
                    held[name][i] = row
        folds.append({"fold": fold, "chosen": combos[best], "held_out": fold_means(runs[best], {fold}),
                      "tuning": fold_means(runs[best], everything - {fold})})
    final = max(range(len(combos)), key=lambda c: objective(fold_means(runs[c], everything)))
    ranked = sorted(range(len(combos)), key=lambda c: -objective(fold_means(runs[c], everything)))
    learned = cv_ranker(data, firsts, [f["chosen"] for f in folds], combos[final], save_ranker_to) if ranker else {}
    return {**learned, "protocol": f"{FOLDS}-fold CV, fold = question position mod {FOLDS} in every set; objective: "
                        "(R@5 + R@2) / 2 averaged over the sets", "sets": list(sets), "combinations": len(combos),
            "held_out": fold_means(held, everything), "folds": folds, "final": combos[final],
            "final_all_folds": fold_means(runs[final], everything),
            "top": [{**combos[c], "objective": round(objective(fold_means(runs[c], everything)), 2)} for c in ranked[:10]]}


def cv_ranker(data: dict[str, tuple[list[Question], Any]], firsts: dict[str, Any], chosen: list[dict[str, Any]],
              final: dict[str, Any], save_to: Path | None) -> dict[str, Any]:
    """The learned ranker's held-out figures: fold f's model is trained on the other folds' candidates
    from fold f's chosen settings, every set weighing the same; then one model on all folds over ``final``."""
    from tandem.retrieve.ranker import LearnedRanker

    depth, hits = GraphStageSettings().rerank_depth, GraphStageSettings().entity_hits
    groups: dict[str, dict[str, list]] = {}  # settings (as JSON) -> set -> per-question groups
    retrievers: dict[str, dict[str, GraphRetriever]] = {}
    for settings in [*chosen, final]:
        key = json.dumps(settings, sort_keys=True)
        if key not in groups:
            retrievers[key] = {name: GraphRetriever(idx, firsts[name], **settings) for name, (_, idx) in data.items()}
            groups[key] = {name: training_groups(retrievers[key][name], data[name][0], depth) for name in data}

    def train(key: str, folds: set[int]) -> Any:
        picked = [(g, 1.0 / len(per_set)) for per_set in groups[key].values()
                  for i, g in enumerate(per_set) if i % FOLDS in folds]
        return train_ranker([g for g, _ in picked], [len(picked) * w for _, w in picked])

    held: dict[str, list] = {name: [None] * len(groups[next(iter(groups))][name]) for name in data}
    train_s = []
    for fold, settings in enumerate(chosen):
        key = json.dumps(settings, sort_keys=True)
        start = time.perf_counter()
        booster = train(key, set(range(FOLDS)) - {fold})
        train_s.append(round(time.perf_counter() - start, 2))
        for name, (questions, _) in data.items():
            retriever = retrievers[key][name]
            retriever.ranker = LearnedRanker(booster, depth, hits)
            records, _ = evaluate_retrieval(questions, retriever, (2, 5, 10))
            retriever.ranker = None
            for i, r in enumerate(records):
                if i % FOLDS == fold:
                    held[name][i] = r["scores"]
    out: dict[str, Any] = {"ranker_held_out": fold_means(held, set(range(FOLDS))), "ranker_train_s": train_s,
                           "ranker_folds": [fold_means(held, {fold}) for fold in range(FOLDS)]}
    if save_to is not None:
        save_ranker(train(json.dumps(final, sort_keys=True), set(range(FOLDS))), save_to)
        out["ranker_saved"] = str(save_to)
    return out


def ablate(work: Path, rebuild: bool, variants: dict[str, dict[str, Any]], fold_settings: list[dict[str, Any]],
           sets: Sequence[str] = CV_SETS, settings: dict[str, Any] | None = None,
           first_stage: dict[str, Any] | None = None, nested: bool = False) -> dict[str, Any]:
    """Ranker variants on held-out folds, cheaply: each set's candidates (under each fold's settings, every
    feature of :data:`tandem.retrieve.ranker.FEATURES`) are computed once per (``rerank_depth``,
    ``entity_hits``) the variants ask for; each variant (``features``: the columns it may use,
    ``rerank_depth``, ``entity_hits``, LightGBM ``params``, ``rounds``, ``bag``, ``set_weights``) trains fold
    f's model on the other folds, as :func:`cv_ranker` does, and re-orders fold f's candidates. With
    ``nested``, each outer fold also picks one variant by the objective of an inner cross-validation over
    the other four folds and is scored with it: a held-out figure for the choice among the variants."""
    from tandem.eval.retrieval_metrics import retrieval_scores
    from tandem.retrieve.ranker import FEATURES

    data = {name: (load_set(name)[0], ensure_index(name, work, rebuild)[0]) for name in sets}
    first = dict(first_stage or {})
    kind = first.pop("kind", None)
    firsts = {name: Cached(open_retriever(idx, kind or idx.kind, **first)) for name, (_, idx) in data.items()}

    def shape(variant: dict[str, Any]) -> tuple[int, int]:
        defaults = GraphStageSettings()
        return int(variant.get("rerank_depth", defaults.rerank_depth)), int(variant.get("entity_hits", defaults.entity_hits))

    for label, variant in variants.items():
        unknown = sorted(set(variant.get("features", FEATURES)) - set(FEATURES))
        if unknown:
            raise SystemExit(f"variant {label!r}: features {unknown} are not in this tandem's ranker; it has {list(FEATURES)}")
    cache: dict[tuple[str, tuple[int, int]], dict[str, list]] = {}  # (settings, shape) -> set -> per question
    for fold_set in fold_settings:
        for depth, hits in {shape(v) for v in variants.values()}:
            key = (json.dumps(fold_set, sort_keys=True), (depth, hits))
            if key in cache:
                continue
            cache[key] = {}
            for name, (questions, idx) in data.items():
                g = GraphRetriever(idx, firsts[name], dense=DenseRetriever(idx),
                                   **{**fold_set, **(settings or {}), "ranker": "none"})
                cache[key][name] = [([g.doc_ids[r] for r in rows.tolist()], features, labels, q.gold_doc_ids)
                                    for (rows, features, labels), q in zip(candidate_groups(g, questions, depth, hits),
                                                                           questions, strict=True)]

    def held_out(variant: dict[str, Any], train_folds: set[int], test_folds: set[int]) -> dict[str, list]:
        cols = [FEATURES.index(f) for f in variant.get("features", FEATURES)]
        weigh = variant.get("set_weights", {})  # a set's share of the training weight (default: equal)
        held: dict[str, list] = {name: [None] * len(data[name][0]) for name in data}
        for fold in test_folds:
            per_set = cache[(json.dumps(fold_settings[fold], sort_keys=True), shape(variant))]
            train = [((x[:, cols], y), float(weigh.get(name, 1.0)) / len(groups)) for name, groups in per_set.items()
                     for i, (_, x, y, _) in enumerate(groups) if i % FOLDS in train_folds - {fold} and y.any()]
            model = train_ranker([g for g, _ in train], [len(train) * w for _, w in train],
                                 rounds=int(variant.get("rounds", ROUNDS)), bag=int(variant.get("bag", BAG)),
                                 params=variant.get("params", {}))
            for name, groups in per_set.items():
                for i, (ids, x, _, gold) in enumerate(groups):
                    if i % FOLDS == fold:
                        top = [ids[j] for j in np.lexsort((np.arange(len(ids)), -model.predict(x[:, cols])))] if ids else []
                        held[name][i] = retrieval_scores(gold, top, (2, 5, 10))
        return held

    everything = set(range(FOLDS))
    out: dict[str, Any] = {"fold_settings": fold_settings}
    for label, variant in variants.items():
        held = held_out(variant, everything, everything)
        out[label] = {"held_out": fold_means(held, everything), "folds": [fold_means(held, {f}) for f in range(FOLDS)]}
    if nested:
        final: dict[str, list] = {name: [None] * len(data[name][0]) for name in data}
        choices = []
        for fold in range(FOLDS):
            inner = everything - {fold}
            objectives = {label: objective(fold_means(held_out(v, inner, inner), inner)) for label, v in variants.items()}
            best = max(objectives, key=lambda label: objectives[label])
            choices.append({"fold": fold, "chosen": best, "inner_objective": {k: round(v, 2) for k, v in objectives.items()}})
            for name, rows in held_out(variants[best], everything, {fold}).items():
                for i, row in enumerate(rows):
                    if i % FOLDS == fold:
                        final[name][i] = row
        out["nested"] = {"held_out": fold_means(final, everything), "choices": choices}
    return out


def report(work: Path, rebuild: bool, sets: Sequence[str], queries: int, settings: dict[str, Any],
           variants: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Figures of bm25 / dense / hybrid / graph (the issue-16 defaults, the fused order without the ranker,
    the current defaults; and any named ``variants`` of the
    graph settings) on each set."""
    defaults = GraphStageSettings().to_dict()  # the graph stage's shipped settings
    out: dict[str, Any] = {"graph_settings": {**defaults, **settings}, "variants": {n: {**defaults, **v} for n, v in variants.items()}}
    for name in sets:
        idx, times = ensure_index(name, work, rebuild)
        questions = load_set(name)[0]
        parts = {"all": slice(None), **{f"fold {f}": slice(f, None, FOLDS) for f in range(FOLDS)}}
        if name == "hotpotqa":  # dev500 is 250 bridge questions (0-249) followed by 250 comparison questions
            parts.update({"0-249 (bridge)": slice(0, 250), "250-499 (comparison)": slice(250, 500)})
        graph = idx.manifest.params["graph"]
        start = time.perf_counter()
        GraphExtra(**{k: graph[k] for k in DEFAULT_GRAPH})(idx.store)  # the graph's share of a build
        times["graph_build_s"] = round(time.perf_counter() - start, 2)
        entry: dict[str, Any] = {"passages": idx.manifest.doc_count, "questions": len(questions), **times,
                                 "graph_edges": {"mention": graph["mention_edges"], "entity": graph["entity_edges"]},
                                 "graph_bytes": sum((idx.folder / "extras" / f"{n}.npy").stat().st_size
                                                    for n in idx.manifest.extras if n.startswith("graph_"))}
        kinds: dict[str, tuple[str, dict[str, Any]]] = {
            "bm25": ("bm25", {}), "dense": ("dense", {}), "hybrid": ("hybrid", {}),
            "graph (before: issue 16 defaults)": ("graph", {**ISSUE16, **settings}),
            "graph ranker=none": ("graph", {**settings, "ranker": "none"}), "graph": ("graph", settings),
            **{f"graph {label}": ("graph", options) for label, options in variants.items()},
        }
        for label, (kind, options) in kinds.items():
            retriever = open_retriever(idx, kind, **options)
            entry[label] = part_scores(questions, retriever, parts)
            timed = [q.text for q in questions[:queries]]
            entry[label].update(latency_ms(retriever, timed))
            if isinstance(retriever, GraphRetriever):  # the graph stage alone: first-stage rankings cached
                first = Cached(retriever.first)
                first.search_batch(timed, int(retriever.settings["depth"]))
                stage = GraphRetriever(idx, first, dense=retriever.dense, **retriever.settings)
                entry[label].update({f"graph_stage_{k}": v for k, v in latency_ms(stage, timed).items()})
        entry["load_average"] = [round(x, 2) for x in os.getloadavg()]  # contention inflates the latencies
        out[name] = entry
    return out


def pool_sizes(work: Path, rebuild: bool, queries: int, pools: Sequence[str]) -> dict[str, Any]:
    """How the dev500 figures move with the pool: dev500's own pool, then each POOLS pool (other sets'
    passages added as distractors) and SCALE_POOLS pool (windows of those passages added); hybrid, graph
    without the ranker, graph with the defaults."""
    questions = load_set("hotpotqa")[0]
    out: dict[str, Any] = {}
    for name in pools:
        idx, times = ensure_index(name, work, rebuild)
        entry: dict[str, Any] = {"passages": idx.manifest.doc_count, **times}
        for label, kind, options in (("hybrid", "hybrid", {}), ("graph ranker=none", "graph", {"ranker": "none"}),
                                     ("graph", "graph", {})):
            retriever = open_retriever(idx, kind, **options)
            entry[label] = {**scores(questions, retriever), **latency_ms(retriever, [q.text for q in questions[:queries]])}
        entry["load_average"] = [round(x, 2) for x in os.getloadavg()]
        out[name] = entry
    return out


def latency(work: Path, sets: Sequence[str], queries: int, settings: dict[str, Any], clock: str = "wall") -> dict[str, Any]:
    """Single-query p50/p95 only (no recall), for a run on a quiet machine; ``clock="cpu"`` times the
    process's CPU time instead of wall time (what a loaded, shared machine distorts least)."""
    timer = time.process_time if clock == "cpu" else time.perf_counter
    out: dict[str, Any] = {"clock": clock}
    for name in sets:
        idx, _ = ensure_index(name, work, False)
        timed = [q.text for q in load_set(name)[0][:queries]]
        entry: dict[str, Any] = {kind: latency_ms(open_retriever(idx, kind, **(settings if kind == "graph" else {})), timed,
                                             clock=timer) for kind in ("bm25", "dense", "hybrid", "graph")}
        first = Cached(open_retriever(idx, idx.kind))
        first.search_batch(timed, int(settings.get("depth", GraphStageSettings().depth)))
        entry["graph_stage"] = latency_ms(GraphRetriever(idx, first, **settings), timed, clock=timer)
        entry["load_average"] = [round(x, 2) for x in os.getloadavg()]
        out[name] = entry
    return out


def methods(runs: Sequence[Path]) -> dict[str, Any]:
    """Gold-document recall of ``tandem eval qa`` run folders (finished or not): each run's questions
    done, and the mean recall over the questions every given run has done (a fair comparison)."""
    from tandem.eval.runner import PREDICTIONS, read_finished

    done = {str(run): read_finished(run / PREDICTIONS) for run in runs}  # read only: a run may be writing
    common = set.intersection(*(set(records) for records in done.values())) if done else set()
    out: dict[str, Any] = {"common_questions": len(common)}
    for run, records in done.items():
        shared = [records[q]["gold_doc_recall"] for q in sorted(common)]
        out[run] = {"questions": len(records),
                    "gold_doc_recall_common": round(sum(shared) / len(shared), 3) if shared else None}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("cv", "ablate", "report", "pools", "latency", "methods"))
    parser.add_argument("--first-stage", help='ablate: the first stage as JSON, e.g. {"kind": "hybrid", '
                                             '"weights": [0.5, 1.0]} (default: the index\'s kind)')
    parser.add_argument("--fold-settings", type=Path, help="ablate: a cv run's JSON; each fold's chosen settings "
                                                            "(default: the shipped settings on every fold)")
    parser.add_argument("--runs", nargs="+", type=Path, default=[], help="methods: tandem eval qa run folders")
    parser.add_argument("--work", type=Path, default=Path("indexes/bench-graph"))
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=[*SETS, *POOLS, *SCALE_POOLS],
                        help="the sets (latency: also a pool, timed with its first questions, dev500's)")
    parser.add_argument("--pools", nargs="+", default=["hotpotqa", *POOLS, *SCALE_POOLS],
                        choices=["hotpotqa", *POOLS, *SCALE_POOLS], help="pools: the pools to measure, smallest first")
    parser.add_argument("--queries", type=int, default=200, help="queries timed for latency")
    parser.add_argument("--rebuild", action="store_true", help="build the indexes again (and time the builds)")
    parser.add_argument("--set", dest="settings", action="append", default=[], help="graph retriever KEY=VALUE")
    parser.add_argument("--variant", nargs=2, action="append", default=[], metavar=("LABEL", "JSON"),
                        help="report: also a graph retriever with these settings (a JSON object); ablate: a ranker "
                             "variant ({features: [...], rerank_depth, entity_hits, params: {...}, rounds, bag, "
                             "set_weights: {set: weight}})")
    parser.add_argument("--ranker", action="store_true", help="cv: also cross-validate the learned ranker")
    parser.add_argument("--nested", action="store_true", help="ablate: also choose among the variants by an inner "
                                                               "cross-validation in each outer fold (held-out figure of the choice)")
    parser.add_argument("--save-ranker", type=Path, help="cv: write the ranker trained on all folds here "
                                                           "(src/tandem/retrieve/graph_ranker.txt ships: update its PROVENANCE.md)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="latency: wall time or process CPU time")
    args = parser.parse_args()
    offline_env()
    settings = {k: json.loads(v) if v[:1].isdigit() or v in ("true", "false") else v
                for k, _, v in (s.partition("=") for s in args.settings)}
    variants = {label: json.loads(options) for label, options in args.variant}
    if args.mode == "cv":
        result = cross_validate(args.work, args.rebuild, ranker=args.ranker or args.save_ranker is not None,
                                save_ranker_to=args.save_ranker)
    elif args.mode == "ablate":
        chosen = ([f["chosen"] for f in json.loads(args.fold_settings.read_text())["folds"]] if args.fold_settings
                  else [{}] * FOLDS)
        result = ablate(args.work, args.rebuild, variants or {"defaults": {}}, chosen, settings=settings,
                        first_stage=json.loads(args.first_stage) if args.first_stage else None, nested=args.nested)
    elif args.mode == "pools":
        result = pool_sizes(args.work, args.rebuild, args.queries, args.pools)
    elif args.mode == "methods":
        result = methods(args.runs)
    elif args.mode == "latency":
        result = latency(args.work, args.sets, args.queries, settings, args.clock)
    else:
        result = report(args.work, args.rebuild, args.sets, args.queries, settings, variants)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
