"""A learned second stage for the graph retriever: LightGBM LambdaRank over its signals.

The graph retriever's fused score adds its signals with fixed weights. The ranker re-orders its
candidates with gradient-boosted LambdaRank models (LightGBM; Burges, "From RankNet to LambdaRank to
LambdaMART", 2010) over corpus-independent features of each (question, passage) pair
(:data:`FEATURES`): the first-stage score and rank, the PageRank score, the question's title links,
bridge edges from and to the top first-stage hits and the passages the question names, shared-entity
and mention edges to the top fused passages, the passage's in- and out-degree, the share of its title's
words the question holds, its place in the fused list and, on an index with dense vectors, its cosine to
the question and to the top hit. No LLM, and no encoder beyond the index's own (the question vector is
the first stage's).

**Candidates** (:meth:`BridgeFeatures.candidates`): the top ``rerank_depth`` passages of the fused score,
plus every passage that shares an entity (the graph's entity edges: a multi-word name in at most
``entity_max_df`` passages) with one of the top ``entity_hits`` fused passages. A chain's next passage is
often about something the first one names without a passage of that title (MuSiQue: "Brand (play)" names
Henrik Ibsen; the gold passage is "Nora Ibsen", which names him too): such passages are rarely in the
fused top 30, and this widening adds about 7 candidates a question.

**Models**: a bag of LightGBM models whose scores are averaged (:class:`Bag`). The package only loads and
scores them; training is research code under ``benchmarks/`` (``benchmarks/ranker_training.py``).

The model ships with the package (``graph_ranker.txt``: LightGBM's text format, one block per bagged
model, behind a one-line header ``# tandem graph ranker vN``; how it was trained and on what data:
``graph_ranker.PROVENANCE.md`` beside it); ``benchmarks/graph_retrieval.py cv --save-ranker PATH`` trains
it again (under a minute on CPU) from the cross-validation sets and writes it atomically.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import sparse

from tandem.errors import ConfigError
from tandem.index.passage_graph import normalise

if TYPE_CHECKING:
    from tandem.retrieve.graph import GraphRetriever, Signals

RANKER_VERSION = 2
HEADER = f"# tandem graph ranker v{RANKER_VERSION}\n"
SEPARATOR = "\n# tandem graph ranker: next bagged model\n"
SHIPPED = Path(__file__).with_name("graph_ranker.txt")
SHIPPED_NAME = f"learned-v{RANKER_VERSION}"
PARENTS = 3  # bridge features look at the top 3 first-stage hits, entity and mention features at the top 3 fused
FEATURES = (
    "fused", "fused_rank", "first", "first_rank", "graph", "linked", "linked_count",
    "named_by_top", "names_top", "named_by_top1", "two_hops_from_top", "named_by_linked", "names_linked",
    "log_in_degree", "log_out_degree",
    "title_in_question", "dense_cosine", "dense_to_top1",
    # v2: edges to the top fused passages, and whether the passage is one of the fused top or was added
    "entity_with_fused_top", "entities_with_fused_top", "mention_with_fused_top", "two_mentions_from_fused_top",
    "in_fused_top",
)


def _lightgbm() -> Any:
    try:
        import lightgbm
    except ImportError as exc:  # a declared dependency; an environment without it gets a clear message
        raise ConfigError("the learned graph ranker needs lightgbm: pip install lightgbm "
                          "(or set the graph retriever's ranker=none)") from exc
    return lightgbm


class BridgeFeatures:
    """The corpus side of the features: mention edges both ways, shared-entity edges, degrees, title words
    and, on an index with exact dense rows, the passage vectors (cosine to the question and to the top
    first-stage hit). An index built without entity edges gets zeros for the entity features and no
    added candidates."""

    def __init__(self, mention: sparse.csr_matrix, titles: Sequence[str], vectors: Any = None,
                 entity: sparse.csr_matrix | None = None) -> None:
        binary = (mention > 0).astype(np.float32).tocsr()
        self.names = binary  # names[i, j] = 1: passage i mentions passage j's title
        self.named_by = binary.T.tocsr()
        self.either = ((binary + self.named_by) > 0).astype(np.float32).tocsr()  # a mention either way
        n = binary.shape[0]
        entity = sparse.csr_matrix((n, n), dtype=np.float32) if entity is None else entity.astype(np.float32).tocsr()
        self.entity = entity  # weight: sum over shared entities of 1 / (df - 1)
        self.shares = (entity > 0).astype(np.float32).tocsr()
        self.log_in = np.log1p(np.asarray(binary.sum(axis=0)).ravel()).astype(np.float32)
        self.log_out = np.log1p(np.asarray(binary.sum(axis=1)).ravel()).astype(np.float32)
        self.titles = titles
        self.vectors = vectors  # the index's exact passage vectors (rows indexable by sorted arrays), if any

    def candidates(self, fused: np.ndarray, depth: int, entity_hits: int) -> tuple[np.ndarray, int]:
        """The rows to rank, by fused score (ties by row), and how many of them are the fused top ``depth``:
        that top, then the passages sharing an entity with one of the top ``entity_hits`` (not already in it)."""
        top = candidate_rows(fused, depth)
        if not entity_hits or not len(top):
            return top, len(top)
        hits = np.zeros(len(fused), dtype=np.float32)
        hits[top[:entity_hits]] = 1.0
        added = np.flatnonzero(self.shares @ hits)
        added = added[~np.isin(added, top)]
        added = added[np.lexsort((added, -fused[added]))]
        return np.concatenate([top, added]), len(top)

    def matrix(self, signals: Signals, col: int, rows: np.ndarray, question: str, core: int | None = None) -> np.ndarray:
        """(len(rows), len(FEATURES)) features of the candidate ``rows`` of batch column ``col``, best fused
        first; the first ``core`` of them (default all) are the fused top, the rest added candidates."""
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
        fused_all = signals.fused[:, col]
        best = candidate_rows(fused_all, PARENTS)
        fused_top = np.zeros(len(fused_all), dtype=np.float32)
        fused_top[best] = 1.0 / np.arange(1, len(best) + 1, dtype=np.float32)
        mention_top = self.either @ fused_top  # the whole pool: the next column takes a step from it
        sub_entity, sub_either = self.entity[rows], self.either[rows]  # the candidates' rows alone
        in_top = np.arange(len(rows)) < (len(rows) if core is None else core)
        columns = [
            fused, 1.0 / np.arange(1, len(rows) + 1), signals.first[rows, col], first_rank[rows],
            signals.graph[rows, col], linked[rows], np.full(len(rows), linked.sum()),
            named_by_top[rows], (self.names @ parents)[rows], (self.named_by @ top1)[rows],
            (self.named_by @ named_by_top)[rows],
            (self.named_by @ linked)[rows], (self.names @ linked)[rows],
            self.log_in[rows], self.log_out[rows], title_share, cosine, to_top1,
            sub_entity @ fused_top, self.shares[rows] @ fused_top, mention_top[rows],
            sub_either @ mention_top, in_top,
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


class Bag:
    """LightGBM boosters whose scores are averaged."""

    def __init__(self, boosters: Sequence[Any]) -> None:
        if not boosters:
            raise ConfigError("a graph ranker needs at least one model")
        self.boosters = list(boosters)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The mean score of the bagged models for each row of ``x``."""
        return np.mean([b.predict(x, num_threads=1) for b in self.boosters], axis=0)

    def to_text(self) -> str:
        """The models in LightGBM's text format, behind the version header (what ``benchmarks/ranker_training.py`` writes)."""
        return HEADER + SEPARATOR.join(b.model_to_string() for b in self.boosters)

    @classmethod
    def from_text(cls, text: str, where: str) -> Bag:
        """Models from :meth:`to_text`'s output; ``where`` names the source in errors."""
        if not text.startswith(HEADER):
            first = text.splitlines()[0] if text else ""
            raise ConfigError(f"{where}:1: not a tandem graph ranker v{RANKER_VERSION} model (header {first[:60]!r}); "
                              "train one with `python benchmarks/graph_retrieval.py cv --save-ranker PATH`")
        lgb = _lightgbm()
        boosters = []
        for part in text[len(HEADER):].split(SEPARATOR):
            try:
                boosters.append(lgb.Booster(model_str=part))
            except lgb.basic.LightGBMError as exc:
                raise ConfigError(f"{where}: model {len(boosters) + 1} of the graph ranker is damaged ({exc}); "
                                  "train it again with `python benchmarks/graph_retrieval.py cv --save-ranker PATH`") from exc
        width = {b.num_feature() for b in boosters}
        if width != {len(FEATURES)}:
            raise ConfigError(f"{where}: the graph ranker's models read {sorted(width)} features; this tandem computes "
                              f"{len(FEATURES)}")
        return cls(boosters)


class LearnedRanker:
    """Re-orders the graph retriever's candidates (:meth:`BridgeFeatures.candidates`: the fused top ``depth``
    and the passages sharing an entity with the top ``entity_hits``) with a bag of LightGBM models."""

    def __init__(self, model: Bag, depth: int, entity_hits: int = 0) -> None:
        self.model, self.depth, self.entity_hits = model, depth, entity_hits

    @classmethod
    def open(cls, spec: str, depth: int, entity_hits: int = 0) -> LearnedRanker:
        """``learned`` / ``learned-vN`` (the shipped model; N must be its version) or a model file's path."""
        if spec.startswith("learned"):
            if spec not in ("learned", SHIPPED_NAME):
                raise ConfigError(f"graph ranker {spec!r} is not shipped here: this tandem ships {SHIPPED_NAME!r} "
                                  "(or give a model file's path, or ranker=none)")
            return cls.load(SHIPPED, depth, entity_hits)
        return cls.load(spec, depth, entity_hits)

    @classmethod
    def load(cls, path: str | Path, depth: int, entity_hits: int = 0) -> LearnedRanker:
        """A model file in :meth:`Bag.to_text`'s format (its version header checked)."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"graph ranker model {path} does not exist")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not a tandem graph ranker model (not UTF-8 text: {exc.reason})") from exc
        return cls(Bag.from_text(text, str(path)), depth, entity_hits)

    def rank(self, retriever: GraphRetriever, signals: Signals, queries: Sequence[str],
             k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query, the top-``k`` rows and their model scores, best first."""
        out = []
        for col, question in enumerate(queries):
            rows, core = retriever.features.candidates(signals.fused[:, col], max(self.depth, k), self.entity_hits)
            if not len(rows):
                out.append((rows, np.zeros(0, dtype=np.float32)))
                continue
            scores = self.model.predict(retriever.features.matrix(signals, col, rows, question, core))
            order = np.lexsort((np.arange(len(rows)), -scores))[:k]
            out.append((rows[order], scores[order]))
        return out

