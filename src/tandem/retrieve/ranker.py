"""A learned second stage for the graph retriever: LightGBM LambdaRank over its signals.

The graph retriever's fused score adds its signals with fixed weights. The ranker re-orders the top
``rerank_depth`` passages of that score with a gradient-boosted LambdaRank model (LightGBM; Burges,
"From RankNet to LambdaRank to LambdaMART", 2010) over corpus-independent features of each
(question, passage) pair (:data:`FEATURES`): the first-stage score and rank, the PageRank score, the
question's title links, bridge edges from and to the top first-stage hits and the passages the
question names, the passage's in- and out-degree, the share of its title's words the question holds,
its place in the fused list and, on an index with dense vectors, its cosine to the question and to
the top hit. No LLM, and no encoder beyond the index's own (the question vector is the first stage's).

The model ships with the package (``graph_ranker.txt``: LightGBM's text format behind a one-line
header ``# tandem graph ranker vN``); ``benchmarks/graph_retrieval.py cv --save-ranker PATH`` trains it
again (a few seconds on CPU) from the cross-validation sets and writes it atomically.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import sparse

from tandem.errors import ConfigError
from tandem.index.graph import normalise
from tandem.io import atomic_open

if TYPE_CHECKING:
    from tandem.retrieve.graph import GraphRetriever, Signals

RANKER_VERSION = 1
HEADER = f"# tandem graph ranker v{RANKER_VERSION}\n"
SHIPPED = Path(__file__).with_name("graph_ranker.txt")
SHIPPED_NAME = f"learned-v{RANKER_VERSION}"
PARENTS = 3  # bridge features look at the top 3 first-stage hits
FEATURES = (
    "fused", "fused_rank", "first", "first_rank", "graph", "linked", "linked_count",
    "named_by_top", "names_top", "named_by_top1", "two_hops_from_top", "named_by_linked", "names_linked",
    "log_in_degree", "log_out_degree",
    "title_in_question", "dense_cosine", "dense_to_top1",
)
PARAMS: dict[str, Any] = {  # LambdaRank, small trees: about 15 k rows train in seconds
    "objective": "lambdarank", "metric": "ndcg", "eval_at": [2, 5], "learning_rate": 0.05,
    "num_leaves": 15, "min_data_in_leaf": 20, "feature_fraction": 0.9, "lambdarank_truncation_level": 10,
    "verbose": -1, "num_threads": 1, "deterministic": True, "seed": 0,
}
ROUNDS = 200


def _lightgbm() -> Any:
    try:
        import lightgbm
    except ImportError as exc:  # a declared dependency; an environment without it gets a clear message
        raise ConfigError("the learned graph ranker needs lightgbm: pip install lightgbm "
                          "(or set the graph retriever's ranker=none)") from exc
    return lightgbm


class BridgeFeatures:
    """The corpus side of the features: mention edges both ways, degrees, title words and, on an index
    with exact dense rows, the passage vectors (cosine to the question and to the top first-stage hit)."""

    def __init__(self, mention: sparse.csr_matrix, titles: Sequence[str], vectors: Any = None) -> None:
        binary = (mention > 0).astype(np.float32).tocsr()
        self.names = binary  # names[i, j] = 1: passage i mentions passage j's title
        self.named_by = binary.T.tocsr()
        self.log_in = np.log1p(np.asarray(binary.sum(axis=0)).ravel()).astype(np.float32)
        self.log_out = np.log1p(np.asarray(binary.sum(axis=1)).ravel()).astype(np.float32)
        self.titles = titles
        self.vectors = vectors  # the index's exact passage vectors (rows indexable by sorted arrays), if any

    def matrix(self, signals: Signals, col: int, rows: np.ndarray, question: str) -> np.ndarray:
        """(len(rows), len(FEATURES)) features of the candidate ``rows`` of batch column ``col``."""
        first_rank = signals.first_rank[:, col]
        top = np.argpartition(-first_rank, PARENTS)[:PARENTS] if len(first_rank) > PARENTS else np.arange(len(first_rank))
        top = top[np.argsort(-first_rank[top], kind="stable")]
        parents = np.zeros(len(first_rank), dtype=np.float32)
        parents[top] = first_rank[top]
        top1 = np.zeros(len(first_rank), dtype=np.float32)
        top1[top[:1]] = first_rank[top[:1]] > 0  # no first-stage hit: no top hit
        named_by_top = self.named_by @ parents
        linked = signals.linked[:, col]
        fused = signals.fused[rows, col]
        words = set(normalise(question).split())
        title_share = [_share(normalise(self.titles[r]).split(), words) for r in rows.tolist()]
        cosine = to_top1 = np.zeros(len(rows), dtype=np.float32)
        if signals.query_vectors is not None and self.vectors is not None:
            vectors = np.asarray(self.vectors[np.sort(rows)], dtype=np.float32)[np.argsort(np.argsort(rows))]
            cosine = vectors @ signals.query_vectors[col]
            to_top1 = vectors @ np.asarray(self.vectors[top[:1]], dtype=np.float32)[0]
        columns = [
            fused, 1.0 / np.arange(1, len(rows) + 1), signals.first[rows, col], first_rank[rows],
            signals.graph[rows, col], linked[rows], np.full(len(rows), linked.sum()),
            named_by_top[rows], (self.names @ parents)[rows], (self.named_by @ top1)[rows],
            (self.named_by @ named_by_top)[rows],
            (self.named_by @ linked)[rows], (self.names @ linked)[rows],
            self.log_in[rows], self.log_out[rows], title_share, cosine, to_top1,
        ]
        return np.column_stack(columns).astype(np.float32)


def _share(title_words: list[str], question_words: set[str]) -> float:
    return sum(w in question_words for w in title_words) / len(title_words) if title_words else 0.0


def candidate_rows(fused: np.ndarray, depth: int) -> np.ndarray:
    """Rows of the top ``depth`` passages by fused score (positive scores only), best first."""
    depth = min(depth, int((fused > 0).sum()))
    if depth <= 0:
        return np.zeros(0, dtype=np.int64)
    part = np.argpartition(-fused, depth - 1)[:depth]
    return part[np.lexsort((part, -fused[part]))]


def candidate_groups(retriever: GraphRetriever, questions: Sequence[Any], depth: int
                     ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per question (with gold ids): the pool rows of its top ``depth`` candidates, their features and their
    0/1 gold labels."""
    out = []
    for start in range(0, len(questions), 64):
        batch = questions[start:start + 64]
        signals = retriever.signals([q.text for q in batch], depth, with_vectors=True)
        for col, q in enumerate(batch):
            rows = candidate_rows(signals.fused[:, col], depth)
            gold = {retriever.row_of[d] for d in q.gold_doc_ids if d in retriever.row_of}
            labels = np.array([r in gold for r in rows.tolist()], dtype=np.float32)
            out.append((rows, retriever.features.matrix(signals, col, rows, q.text), labels))
    return out


def training_groups(retriever: GraphRetriever, questions: Sequence[Any], depth: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per question (with gold ids), the features of its top ``depth`` candidates and their 0/1 gold labels."""
    return [(features, labels) for _rows, features, labels in candidate_groups(retriever, questions, depth)]


class LearnedRanker:
    """Re-orders the top ``depth`` passages of the graph retriever's fused score with a LightGBM model."""

    def __init__(self, booster: Any, depth: int) -> None:
        self.booster, self.depth = booster, depth

    @classmethod
    def open(cls, spec: str, depth: int) -> LearnedRanker:
        """``learned`` / ``learned-vN`` (the shipped model; N must be its version) or a model file's path."""
        if spec.startswith("learned"):
            if spec not in ("learned", SHIPPED_NAME):
                raise ConfigError(f"graph ranker {spec!r} is not shipped here: this tandem ships {SHIPPED_NAME!r} "
                                  "(or give a model file's path, or ranker=none)")
            return cls.load(SHIPPED, depth)
        return cls.load(spec, depth)

    @classmethod
    def load(cls, path: str | Path, depth: int) -> LearnedRanker:
        """A model file written by :func:`save_ranker` (its version header checked)."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"graph ranker model {path} does not exist")
        text = path.read_text(encoding="utf-8")
        if not text.startswith(HEADER):
            first = text.splitlines()[0] if text else ""
            raise ConfigError(f"{path}:1: not a tandem graph ranker v{RANKER_VERSION} model (header {first[:60]!r}); "
                              "train one with `python benchmarks/graph_retrieval.py cv --save-ranker PATH`")
        return cls(_lightgbm().Booster(model_str=text[len(HEADER):]), depth)


    def rank(self, retriever: GraphRetriever, signals: Signals, queries: Sequence[str],
             k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query, the top-``k`` rows and their model scores, best first."""
        out = []
        for col, question in enumerate(queries):
            rows = candidate_rows(signals.fused[:, col], max(self.depth, k))
            if not len(rows):
                out.append((rows, np.zeros(0, dtype=np.float32)))
                continue
            scores = self.booster.predict(retriever.features.matrix(signals, col, rows, question), num_threads=1)
            order = np.lexsort((np.arange(len(rows)), -scores))[:k]
            out.append((rows[order], scores[order]))
        return out


def train_ranker(groups: Sequence[tuple[np.ndarray, np.ndarray]], weights: Sequence[float] | None = None,
                 rounds: int = ROUNDS) -> Any:
    """A LightGBM LambdaRank booster from per-question (features, 0/1 labels) groups, each question
    weighted by ``weights`` (default 1: give a set of n questions 1/n each to weigh sets equally);
    groups without a relevant candidate teach nothing and are left out."""
    weights = [1.0] * len(groups) if weights is None else list(weights)
    kept = [(x, y, w) for (x, y), w in zip(groups, weights, strict=True) if y.any()]
    if not kept:
        raise ConfigError("no training question has a gold passage among its candidates")
    lgb = _lightgbm()
    data = lgb.Dataset(np.vstack([x for x, _, _ in kept]), np.concatenate([y for _, y, _ in kept]),
                       weight=np.concatenate([np.full(len(y), w) for _, y, w in kept]),
                       group=[len(y) for _, y, _ in kept], feature_name=list(FEATURES))
    return lgb.train(PARAMS, data, num_boost_round=rounds)


def save_ranker(booster: Any, path: str | Path) -> None:
    """Write the model with its version header, atomically."""
    with atomic_open(path) as f:
        f.write(HEADER + booster.model_to_string())
