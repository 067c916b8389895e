"""Training the graph retriever's learned ranker (the shipped ``src/tandem/retrieve/graph_ranker.txt``).

Research code: the package ships the trained models and only loads and scores them
(:mod:`tandem.retrieve.ranker`); this module builds the training data and trains them, for
``benchmarks/graph_retrieval.py`` (``cv`` trains each fold's ranker and, with ``--save-ranker PATH``, the
model that ships; ``ablate`` compares variants). Imported by those scripts from their folder, and by the
tests through ``tests/conftest.py``'s ``benchmark_script("ranker_training")``.

**Training data** (:func:`candidate_groups`): per question with gold passages, the candidates the
retriever's ranker would see (:meth:`tandem.retrieve.ranker.BridgeFeatures.candidates`), their
:data:`~tandem.retrieve.ranker.FEATURES` and 0/1 gold labels.

**Models** (:func:`train_ranker`): a bag of :data:`BAG` LightGBM LambdaRank models (Burges, "From RankNet to
LambdaRank to LambdaMART", 2010), each trained on a random 80 % of the rows and features with its own seed,
their scores averaged (the variance of one model on a few hundred training questions moved held-out recall
by a point or more). :func:`save_ranker` writes them in the format the package reads
(:meth:`tandem.retrieve.ranker.Bag.to_text`), atomically.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tandem.errors import ConfigError
from tandem.io import atomic_open
from tandem.retrieve.ranker import FEATURES, Bag

if TYPE_CHECKING:
    from tandem.retrieve.graph import GraphRetriever

PARAMS: dict[str, Any] = {  # LambdaRank, small trees: about 15 k rows train in seconds
    "objective": "lambdarank", "metric": "ndcg", "eval_at": [2, 5], "learning_rate": 0.05,
    "num_leaves": 15, "min_data_in_leaf": 20, "feature_fraction": 0.9, "lambdarank_truncation_level": 10,
    "verbose": -1, "num_threads": 1, "deterministic": True, "seed": 0,
}
ROUNDS = 200
BAG = 5  # models averaged; each sees a random 80 % of the rows (per round) and of the features
BAGGING = {"bagging_fraction": 0.8, "bagging_freq": 1, "feature_fraction": 0.8}
BATCH = 64  # questions whose signals are computed together


def candidate_groups(retriever: GraphRetriever, questions: Sequence[Any], depth: int,
                     entity_hits: int | None = None) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per question (with gold ids): the pool rows of its candidates (the fused top ``depth`` and the
    passages sharing an entity with the top ``entity_hits``, default the retriever's setting), their
    features and their 0/1 gold labels."""
    if entity_hits is None:
        entity_hits = int(retriever.settings["entity_hits"])
    out = []
    for start in range(0, len(questions), BATCH):
        batch = questions[start:start + BATCH]
        signals = retriever.signals([q.text for q in batch], depth, with_vectors=True)
        for col, q in enumerate(batch):
            rows, core = retriever.features.candidates(signals.fused[:, col], depth, entity_hits)
            gold = {retriever.row_of[d] for d in q.gold_doc_ids if d in retriever.row_of}
            labels = np.array([r in gold for r in rows.tolist()], dtype=np.float32)
            out.append((rows, retriever.features.matrix(signals, col, rows, q.text, core), labels))
    return out


def training_groups(retriever: GraphRetriever, questions: Sequence[Any], depth: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per question (with gold ids), the features of its candidates and their 0/1 gold labels."""
    return [(features, labels) for _rows, features, labels in candidate_groups(retriever, questions, depth)]


def train_ranker(groups: Sequence[tuple[np.ndarray, np.ndarray]], weights: Sequence[float] | None = None,
                 rounds: int = ROUNDS, bag: int = BAG, params: dict[str, Any] | None = None) -> Bag:
    """A bag of ``bag`` LightGBM LambdaRank boosters (seeds 0..bag-1, each on a random 80 % of rows and
    features; ``bag=1``: one booster on everything) from per-question (features, 0/1 labels) groups, each
    question weighted by ``weights`` (default 1: give a set of n questions 1/n each to weigh sets equally);
    groups without a relevant candidate teach nothing and are left out."""
    import lightgbm as lgb  # a dependency of the package (the shipped ranker is read with it)

    weights = [1.0] * len(groups) if weights is None else list(weights)
    kept = [(x, y, w) for (x, y), w in zip(groups, weights, strict=True) if y.any()]
    if not kept:
        raise ConfigError("no training question has a gold passage among its candidates")
    width = {x.shape[1] for x, _, _ in kept}
    data = lgb.Dataset(np.vstack([x for x, _, _ in kept]), np.concatenate([y for _, y, _ in kept]),
                       weight=np.concatenate([np.full(len(y), w) for _, y, w in kept]),
                       group=[len(y) for _, y, _ in kept],
                       feature_name=list(FEATURES) if width == {len(FEATURES)} else "auto", free_raw_data=False)
    base = {**PARAMS, **(params or {})}
    if bag <= 1:
        return Bag([lgb.train(base, data, num_boost_round=rounds)])
    return Bag([lgb.train({**base, **BAGGING, "seed": seed}, data, num_boost_round=rounds) for seed in range(bag)])


def save_ranker(model: Bag, path: str | Path) -> None:
    """Write the models with the version header (:meth:`Bag.to_text`), atomically."""
    with atomic_open(path) as f:
        f.write(model.to_text())
