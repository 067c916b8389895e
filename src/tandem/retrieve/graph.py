"""Graph retrieval: a first stage, then personalized PageRank over the index's passage graph.

Multi-hop retrieval without an LLM, after HippoRAG (Gutiérrez et al., "HippoRAG: Neurobiologically
Inspired Long-Term Memory for Large Language Models", NeurIPS 2024) and HippoRAG 2 (Gutiérrez et al.,
"From RAG to Memory: Non-Parametric Continual Learning for Large Language Models", 2025), on the
passage graph of :mod:`tandem.index.passage_graph` (no LLM-extracted triples):

1. the first stage (bm25, dense or hybrid) ranks ``depth`` passages for the question;
   with ``two_hop``, the top ``hop_passages`` passages p each give a second query "question + p"
   (MDR-style, encoded with the index's encoder) whose dense ranking is fused in by RRF;
2. the top ``seeds`` passages become the reset distribution s, s_i proportional to the first-stage
   score min-max normalised over the ranked list (``seed_weighting="score"``) or to 1 / rank;
   the passages the question names (:class:`~tandem.index.passage_graph.TitleLinker`: the question contains
   an alias of their title; HippoRAG's query-entity -> node linking) add ``link_seeds`` to s, shared
   equally (s sums to 1 + ``link_seeds`` before it is normalised);
3. personalized PageRank over the transition matrix P (rows of A normalised to sum 1,
   A = mention edges + ``reverse_weight`` * reversed mention edges + ``entity_weight`` * entity edges),
   ``iterations`` steps of  x <- (1 - d) s + d P^T x  from x = s, with d = ``damping``; the mass that
   reaches a passage without edges returns to s;
4. the graph score g is x itself with ``graph_score="ppr"`` (the default; HippoRAG ranks by it), or,
   with ``"propagated"``, only the mass that reached each passage over edges, x - (1 - d) s (how
   strongly a passage is connected to the seeds, their own relevance being in the first-stage term);
5. the final score fuses both: (1 - ``fusion_weight``) * first / max(first) + ``fusion_weight`` * g / max(g),
   plus ``link_boost`` for each passage the question names;
6. bridge expansion: each of the top ``expand_hits`` first-stage passages p (rank r) adds
   ``expand_weight`` / r / outdeg(p) ** ``hub_damping`` to every passage whose title p mentions (the
   second hop of a bridge question is about an entity the first hop names; a passage naming many
   titles spreads its vote thinner); with ``expand_reverse`` > 0, every passage that mentions p's title
   also gains ``expand_reverse`` * ``expand_weight`` / r / indeg(p) ** ``hub_damping`` (the film whose
   text names the actor found first);
7. with ``ranker`` = ``"learned-v2"`` (the shipped LightGBM LambdaRank models and their version,
   :mod:`tandem.retrieve.ranker`; ``"learned"`` is the shipped one, whatever its version) or a model
   file's path, the top ``rerank_depth`` passages of the fused score, and the passages sharing an entity
   with one of its top ``entity_hits``, are re-ordered by the model over these signals; ``"none"`` keeps
   the fused order.

Defaults were chosen by 5-fold cross-validation over folds mixing HotpotQA dev500, MuSiQue-100 and the
2Wiki/HotpotQA/MuSiQue fixtures (``benchmarks/graph_retrieval.py cv``; docs/graph-tuning.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field
from scipy import sparse

from tandem.errors import ConfigError
from tandem.index.index import Index
from tandem.index.passage_graph import DEFAULT_GRAPH, EXTRA_PREFIX, GRAPH_ARRAYS, TitleLinker, load_graph
from tandem.registry import RETRIEVERS
from tandem.retrieve.base import Retriever
from tandem.retrieve.dense import DenseRetriever
from tandem.retrieve.hybrid import rrf_scores
from tandem.retrieve.ranker import SHIPPED_NAME, BridgeFeatures, LearnedRanker
from tandem.settings import Settings
from tandem.types import Hit


class GraphStageSettings(Settings):
    """What :class:`GraphRetriever` itself reads (the first stage comes built); the defaults were chosen by
    5-fold cross-validation (docs/graph-tuning.md)."""

    at_most: ClassVar[tuple[tuple[str, str], ...]] = (("seeds", "depth"),)

    seeds: int = Field(3, ge=1, description="top first-stage passages that seed the PageRank")
    damping: float = Field(0.5, ge=0.0, lt=1.0, description="PageRank damping d")
    iterations: int = Field(20, ge=0, le=1000, description="PageRank steps")
    seed_weighting: Literal["score", "rank"] = Field("rank", description="seed mass by min-max score or by 1 / rank")
    graph_score: Literal["ppr", "propagated"] = Field("ppr", description="ppr: the PageRank vector; propagated: only "
                                                                         "mass that came over edges")
    reverse_weight: float = Field(0.0, ge=0.0, description="weight of reversed mention edges")
    entity_weight: float = Field(0.0, ge=0.0, description="weight of shared-entity edges")
    fusion_weight: float = Field(0.5, ge=0.0, le=1.0, description="graph score's share of the final score")
    link_seeds: float = Field(1.0, ge=0.0, description="seed mass for passages the question names")
    link_boost: float = Field(0.2, ge=0.0, description="final-score bonus for passages the question names")
    depth: int = Field(50, ge=1, le=10_000, description="first-stage depth")
    two_hop: bool = Field(False, description="second-hop queries 'question + passage' (needs a dense part)")
    hop_passages: int = Field(3, ge=1, description="passages that each give a second-hop query")
    hop_weight: float = Field(1.0, ge=0.0, description="weight of the second-hop rankings in RRF")
    expand_hits: int = Field(3, ge=0, description="top first-stage passages whose mentioned titles get the bridge "
                                                  "bonus (0 = off)")
    expand_weight: float = Field(0.35, ge=0.0, description="bridge bonus of a passage mentioned by the rank-r hit: "
                                                           "expand_weight / r / outdeg^hub_damping")
    hub_damping: float = Field(0.5, ge=0.0, description="how much a hit mentioning many titles spreads its vote "
                                                        "thinner")
    expand_reverse: float = Field(0.0, ge=0.0, description="share of the bonus for passages that mention a top "
                                                           "hit's title")
    ranker: str = Field(SHIPPED_NAME, description="learned re-ordering of the top rerank_depth: learned-v2 "
                                                  "(shipped), learned, a model file's path, or none")
    rerank_depth: int = Field(30, ge=1, description="passages the learned ranker re-orders")
    entity_hits: int = Field(3, ge=0, description="the ranker also re-orders the passages sharing an entity with "
                                                  "the top entity_hits fused (0 = off)")


class FirstStageSettings(Settings):
    """How the ``graph`` retriever picks and fuses its first stage (:func:`tandem.retrieve.open_retriever`)."""

    first_stage: Literal["bm25", "dense", "hybrid"] | None = Field(None, description="the seeding retriever "
                                                                                     "(default: the index's kind)")
    fusion: Literal["rrf", "weighted"] = Field("rrf", description="a hybrid first stage's fusion")
    weights: list[float] | None = Field(None, min_length=2, max_length=2, description="a hybrid first stage's "
                                                                                     "[bm25, dense] weights")
    rrf_c: float = Field(60.0, gt=0, description="a hybrid first stage's RRF c")


class GraphSettings(GraphStageSettings, FirstStageSettings):  # fields: the first stage's, then the graph stage's
    """Graph: a first stage, then personalized PageRank over the index's passage graph (docs/retrieval.md)."""


def missing_graph_message(folder: object) -> str:
    """What to say when an index has no graph extra, and how to add one."""
    return (f"index {folder} has no passage graph (the 'graph' extra): add it with "
            f"`tandem index --add-extras graph --index {folder}` or build with `tandem index ... --extras graph`")


def transition_matrix(graphs: dict[str, sparse.csr_matrix], reverse_weight: float, entity_weight: float) -> sparse.csr_matrix:
    """Row-stochastic P from the typed edge matrices (rows without edges stay zero)."""
    mention = graphs["mention"]
    adjacency = mention + reverse_weight * mention.T.tocsr()
    if entity_weight:
        adjacency = adjacency + entity_weight * graphs["entity"]
    out_weight = np.asarray(adjacency.sum(axis=1)).ravel()
    scale = np.divide(1.0, out_weight, out=np.zeros_like(out_weight), where=out_weight > 0)
    return sparse.diags(scale.astype(np.float32)) @ adjacency.tocsr()


def personalized_pagerank(p_t: sparse.csr_matrix, seeds: np.ndarray, dangling: np.ndarray, damping: float,
                          iterations: int) -> np.ndarray:
    """Columns of ``seeds`` (n, B), each summing to 1, propagated: x <- (1-d) s + d (P^T x + dangling mass * s)."""
    x = seeds.copy()
    for _ in range(iterations):
        lost = x[dangling].sum(axis=0, keepdims=True)
        x = (1.0 - damping) * seeds + damping * (p_t @ x + seeds * lost)
    return x


def expansion_matrix(mention: sparse.csr_matrix, hub_damping: float) -> sparse.csr_matrix:
    """E (n, n) with E[j, i] = 1 / outdeg(i) ** ``hub_damping`` for each mention edge i -> j: ``E @ w`` gives
    each passage the damped weights of the passages that name it."""
    binary = (mention > 0).astype(np.float32)
    out_degree = np.asarray(binary.sum(axis=1)).ravel()
    scale = np.power(np.maximum(out_degree, 1.0), -hub_damping).astype(np.float32)
    return (sparse.diags(scale) @ binary).T.tocsr()


class LastBatchEncoder:
    """An encoder that remembers its last batch: the ranker's query vectors are the first stage's."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.last = inner, ((), None)

    def encode(self, texts: Sequence[str], **options: Any) -> np.ndarray:
        texts = tuple(texts)
        last = self.last  # one read: another thread may replace it
        if last[0] != texts or last[1] is None:
            last = (texts, self.inner.encode(list(texts), **options))
            self.last = last
        return last[1]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def share_query_vectors(first: Any) -> LastBatchEncoder | None:
    """Wrap the encoder of the first stage's dense part (itself, or a hybrid's) so that the query vectors
    it computes are read again without a second encoding; None when it has no dense part."""
    for part in [first, *getattr(first, "retrievers", [])]:
        if isinstance(part, DenseRetriever):
            if not isinstance(part.encoder, LastBatchEncoder):
                part.encoder = LastBatchEncoder(part.encoder)
            return part.encoder
    return None


@dataclass(frozen=True)
class Signals:
    """The graph retriever's per-passage signals for a batch, each (n passages, batch) float32: the
    first-stage score (min-max, scaled to max 1) and 1 / its rank, the graph score (scaled to max 1), the
    question's title links (0/1), the bridge expansion before ``expand_weight``, and the fused score."""

    first: np.ndarray
    first_rank: np.ndarray
    graph: np.ndarray
    linked: np.ndarray
    expanded: np.ndarray
    fused: np.ndarray
    query_vectors: np.ndarray | None = None  # (batch, dim), for the learned ranker on a dense index


class GraphRetriever:
    """First stage -> seeds -> personalized PageRank over the passage graph -> fused ranking."""

    name = "graph"

    def __init__(self, index: Index, first: Retriever, *, dense: Any = None, **settings: Any) -> None:
        """``settings``: :class:`GraphStageSettings`, validated there (an unknown key or a value out of its
        bounds is a ConfigError naming it); ``dense`` serves the second-hop queries of ``two_hop``."""
        s = GraphStageSettings.from_dict(settings, where="graph retriever settings").to_dict()
        if s["two_hop"] and dense is None:
            raise ConfigError(f"two_hop needs a dense component; index {index.folder} is {index.kind!r}")
        if any(name not in index.manifest.extras for name in GRAPH_ARRAYS):
            raise ConfigError(missing_graph_message(index.folder))
        self.index, self.first, self.dense, self.settings = index, first, dense, s
        self.doc_ids = index.store.ids
        self.row_of = index.store.index_of
        arrays = {name[len(EXTRA_PREFIX) + 1:]: index.extra(name) for name in GRAPH_ARRAYS}
        graphs = load_graph(arrays, len(self.doc_ids))
        p = transition_matrix(graphs, float(s["reverse_weight"]), float(s["entity_weight"]))
        self.expansion = expansion_matrix(graphs["mention"], float(s["hub_damping"]))
        titles = [d.title for d in index.store.docs]
        rows = index.faiss.exact_rows() if index.has("dense") else None
        self.query_encoder = share_query_vectors(first) or index.encoder if rows is not None else None
        self.features = BridgeFeatures(graphs["mention"], titles, rows, graphs["entity"])
        self.ranker = (None if s["ranker"] == "none" else
                       LearnedRanker.open(str(s["ranker"]), int(s["rerank_depth"]), int(s["entity_hits"])))
        if float(s["expand_reverse"]):
            reverse = expansion_matrix(graphs["mention"].T.tocsr(), float(s["hub_damping"]))
            self.expansion = (self.expansion + float(s["expand_reverse"]) * reverse).tocsr()
        self.p_t = p.T.tocsr()
        self.dangling = np.asarray(p.sum(axis=1)).ravel() == 0
        min_chars = index.manifest.params.get(EXTRA_PREFIX, {}).get("min_alias_chars", DEFAULT_GRAPH["min_alias_chars"])
        self.linker = TitleLinker(titles, int(min_chars))

    def search(self, query: str, k: int = 10) -> list[Hit]:
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int = 10) -> list[list[Hit]]:
        if not queries:
            return []
        signals = self.signals(queries, k)
        if self.ranker is not None:
            return [self._hits(rows, scores) for rows, scores in self.ranker.rank(self, signals, queries, k)]
        return [self._top(signals.fused[:, col], k) for col in range(len(queries))]

    def signals(self, queries: Sequence[str], k: int = 10, with_vectors: bool | None = None) -> Signals:
        """Every per-passage signal of a batch of queries (columns), the fused score among them; the query
        vectors too when ``with_vectors`` (default: when the learned ranker is on) and the index is dense."""
        s = self.settings
        firsts = self.first.search_batch(queries, max(int(s["depth"]), k))
        if s["two_hop"]:
            firsts = self._two_hop(queries, firsts, max(int(s["depth"]), k))
        n, batch = len(self.doc_ids), len(queries)
        first = np.zeros((n, batch), dtype=np.float32)
        first_rank = np.zeros((n, batch), dtype=np.float32)  # 1 / first-stage rank, 0 outside the list
        seeds = np.zeros((n, batch), dtype=np.float32)
        linked = np.zeros((n, batch), dtype=np.float32)
        for col, query in enumerate(queries):
            linked[self.linker.rows(query), col] = 1.0
        parents = np.zeros((n, batch), dtype=np.float32)  # top first-stage rows, weighted 1 / rank
        for col, hits in enumerate(firsts):
            if not hits:
                continue
            scores = np.array([h.score for h in hits], dtype=np.float32)
            lo, span = scores.min(), float(scores.max() - scores.min()) or 1.0
            norm = (scores - lo) / span + 1e-3  # the last of the list keeps a little weight
            rows = np.array([self.row_of[h.doc_id] for h in hits])
            first[rows, col] = norm
            first_rank[rows, col] = 1.0 / np.arange(1, len(rows) + 1, dtype=np.float32)
            parents[rows[:int(s["expand_hits"])], col] = first_rank[rows[:int(s["expand_hits"])], col]
            top = min(int(s["seeds"]), len(hits))
            weight = norm[:top] if s["seed_weighting"] == "score" else 1.0 / np.arange(1, top + 1, dtype=np.float32)
            seeds[rows[:top], col] = weight / weight.sum()
        if s["link_seeds"]:
            seeds += float(s["link_seeds"]) * linked / np.maximum(linked.sum(axis=0, keepdims=True), 1.0)
            seeds /= np.maximum(seeds.sum(axis=0, keepdims=True), 1e-12)
        damping = float(s["damping"])
        graph = personalized_pagerank(self.p_t, seeds, self.dangling, damping, int(s["iterations"]))
        if s["graph_score"] == "propagated":
            graph = np.maximum(graph - (1.0 - damping) * seeds, 0.0)
        first /= np.maximum(first.max(axis=0, keepdims=True), 1e-12)
        graph /= np.maximum(graph.max(axis=0, keepdims=True), 1e-12)
        lam = float(s["fusion_weight"])
        fused = (1.0 - lam) * first + lam * graph + float(s["link_boost"]) * linked
        expanded = self.expansion @ parents
        if s["expand_weight"]:
            fused += float(s["expand_weight"]) * expanded
        with_vectors = self.ranker is not None if with_vectors is None else with_vectors
        vectors = self.query_encoder.encode(list(queries)) if with_vectors and self.query_encoder else None
        return Signals(first, first_rank, graph, linked, expanded, fused, vectors)

    def _hits(self, rows: np.ndarray, scores: np.ndarray) -> list[Hit]:
        return [Hit(self.doc_ids[row], float(score), rank, self.name)
                for rank, (row, score) in enumerate(zip(rows.tolist(), scores.tolist(), strict=True), 1)]

    def _top(self, scores: np.ndarray, k: int) -> list[Hit]:
        k = min(k, int((scores > 0).sum()))
        if k <= 0:
            return []
        part = np.argpartition(-scores, k - 1)[:k]
        order = part[np.lexsort((part, -scores[part]))]
        return [Hit(self.doc_ids[row], float(scores[row]), rank, self.name) for rank, row in enumerate(order.tolist(), 1)]

    def _two_hop(self, queries: Sequence[str], firsts: list[list[Hit]], depth: int) -> list[list[Hit]]:
        """Fuse, by RRF, each first-stage list with the dense rankings of "question + passage" for its top passages."""
        m = int(self.settings["hop_passages"])
        hop_queries = [f"{q} {self.index.store.get(h.doc_id).text}" for q, hits in zip(queries, firsts, strict=True)
                       for h in hits[:m]]
        hop_runs = iter(self.dense.search_batch(hop_queries, depth)) if hop_queries else iter(())
        out = []
        for hits in firsts:
            rankings = [hits] + [next(hop_runs) for _ in hits[:m]]
            weights = [1.0] + [float(self.settings["hop_weight"])] * (len(rankings) - 1)
            best = sorted(rrf_scores(rankings, weights).items(), key=lambda kv: (-kv[1], kv[0]))[:depth]
            out.append([Hit(doc_id, score, i + 1, "two-hop") for i, (doc_id, score) in enumerate(best)])
        return out


@RETRIEVERS.register("graph", settings=GraphSettings, needs=("graph",))
def _graph(index: Index, s: GraphSettings) -> GraphRetriever:
    """Personalized PageRank over the index's passage graph, seeded by ``first_stage`` (default: the index's kind)."""
    first_kind = s.first_stage or index.kind
    if first_kind == "graph":
        raise ConfigError("the graph retriever's first stage must be bm25, dense or hybrid")
    stage = set(GraphStageSettings.model_fields)
    first_opts = s.model_dump(exclude={"first_stage", *stage}) if first_kind == "hybrid" else {}
    from tandem.retrieve.opener import open_retriever  # at call time: the registry is loaded by then

    first = open_retriever(index, first_kind, **first_opts)
    dense = DenseRetriever(index) if s.two_hop and index.has("dense") else None
    return GraphRetriever(index, first, dense=dense, **s.model_dump(include=stage))
