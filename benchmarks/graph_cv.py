"""Cross-validation and ablations of the graph retriever's settings and ranker: the ``cv`` and ``ablate`` modes
of ``benchmarks/graph_retrieval.py`` (see its docstring for the commands). Question i of every set is in fold
i mod 5; the settings (and the ranker) are chosen on four folds and scored on the fifth."""

from __future__ import annotations

import itertools
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared helpers of graph_retrieval.py
from graph_retrieval import FOLDS, METRICS, Cached, ensure_index, load_set  # noqa: E402
from ranker_training import BAG, ROUNDS, candidate_groups, save_ranker, train_ranker, training_groups  # noqa: E402
from tandem.eval.retrieval import evaluate_retrieval  # noqa: E402
from tandem.retrieve import open_retriever  # noqa: E402
from tandem.retrieve.dense import DenseRetriever  # noqa: E402
from tandem.retrieve.graph import GraphRetriever, GraphStageSettings  # noqa: E402
from tandem.types import Question  # noqa: E402

# the cross-validated search: question links, seeds and fusion weight as before, against the bridge
# expansion (expand_hits, expand_weight, hub_damping); damping, seed weighting, reverse_weight,
# entity_weight and graph_score stay where the first, wider search put them (docs/graph-tuning.md)
GRID = {  # a first 200-combination grid (seeds 3/5, fusion_weight 0.35/0.5, link_boost 0.1/0.2) chose
    "seeds": [3],  # seeds 3, fusion 0.5 and link_boost 0.2 on every fold: they are held here
    "fusion_weight": [0.5],
    "link_seeds": [1.0],
    "link_boost": [0.2],
    "expand": [(0, 0.0, 0.0, 0.0)] + [(m, w, h, r) for m in (2, 3, 5) for w in (0.2, 0.35, 0.5) for h in (0.0, 0.5)
                                      for r in (0.0, 0.5)],
}
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
