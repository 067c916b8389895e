"""The graph retriever's learned ranker: features, training (benchmarks/ranker_training.py), the model file,
and its use in search."""

from __future__ import annotations

import numpy as np
import pytest
from tests.conftest import benchmark_script
from tests.unit.test_graph import BRIDGE_DOCS, FixedFirstStage

from tandem.errors import ConfigError
from tandem.index import build_index, open_index
from tandem.index.passage_graph import GraphExtra
from tandem.retrieve.graph import GraphRetriever, GraphSettings
from tandem.retrieve.ranker import (
    FEATURES,
    HEADER,
    SHIPPED,
    LearnedRanker,
    candidate_rows,
)
from tandem.types import Document, Hit, Question

training = benchmark_script("ranker_training")  # research code: the package only loads the models

QUERY = "What position did the woman who played Corliss Archer hold?"


@pytest.fixture
def bridge_index(tmp_path):
    build_index(BRIDGE_DOCS, tmp_path / "idx", kind="bm25", extras=[GraphExtra(max_df=1.0, entities=False)])
    return open_index(tmp_path / "idx")


def test_features_describe_each_candidate(bridge_index):
    g = GraphRetriever(bridge_index, FixedFirstStage(), ranker="none")
    signals = g.signals([QUERY], 10)
    rows = candidate_rows(signals.fused[:, 0], 30)
    assert len(rows) == len(BRIDGE_DOCS) and rows[0] == g.row_of["q1"]
    x = g.features.matrix(signals, 0, rows, QUERY)
    assert x.shape == (len(rows), len(FEATURES))
    col = {name: i for i, name in enumerate(FEATURES)}
    bridge = list(rows).index(g.row_of["bridge"])
    assert x[bridge, col["named_by_top"]] == pytest.approx(1.0)  # the rank-1 hit (the film) names her
    assert x[0, col["names_top"]] == 0.0  # the film names only her, and she is 8th
    assert x[0, col["first_rank"]] == 1.0 and x[bridge, col["first_rank"]] == pytest.approx(1 / 8)
    story = list(rows).index(g.row_of["n0"])
    assert x[story, col["title_in_question"]] == pytest.approx(2 / 4)  # "corliss archer" of "corliss archer story 0"


def test_a_trained_ranker_learns_the_bridge_and_round_trips(bridge_index, tmp_path):
    """Trained on questions whose gold is the film and the passage it names, the model ranks both on top
    though the first stage puts that passage last; the saved model loads with its header checked."""
    off = {"fusion_weight": 0.0, "link_boost": 0.0, "link_seeds": 0.0, "expand_weight": 0.0}  # the first stage's order
    g = GraphRetriever(bridge_index, FixedFirstStage(), ranker="none", **off)
    assert [h.doc_id for h in g.search(QUERY, 8)][-1] == "bridge"
    questions = [Question(f"q{i}", f"{QUERY} {i}", ("x",), gold_doc_ids=("q1", "bridge")) for i in range(40)]
    groups = training.training_groups(g, questions, 30)
    assert all(y.sum() == 2 for _, y in groups)
    model = training.train_ranker(groups, rounds=20, bag=2)
    assert len(model.boosters) == 2
    training.save_ranker(model, tmp_path / "model.txt")
    assert (tmp_path / "model.txt").read_text().startswith(HEADER)
    g.ranker = LearnedRanker.load(tmp_path / "model.txt", 30)
    assert len(g.ranker.model.boosters) == 2  # both bagged models read back
    hits = g.search(QUERY, 3)
    assert {h.doc_id for h in hits[:2]} == {"q1", "bridge"} and [h.rank for h in hits] == [1, 2, 3]
    with pytest.raises(ConfigError, match="no training question has a gold passage"):
        training.train_ranker([(np.zeros((3, len(FEATURES)), np.float32), np.zeros(3, np.float32))])


def test_the_shipped_model_ships_with_its_provenance():
    """graph_ranker.PROVENANCE.md beside the model says how it was trained (the command) and on what data, for
    this very file (its SHA-256: a retrained model needs its record updated), and both are package data."""
    import hashlib
    import tomllib
    from pathlib import Path

    provenance = SHIPPED.with_name("graph_ranker.PROVENANCE.md")
    text = provenance.read_text(encoding="utf-8")
    assert hashlib.sha256(SHIPPED.read_bytes()).hexdigest() in text
    assert "python benchmarks/graph_retrieval.py cv --save-ranker src/tandem/retrieve/graph_ranker.txt" in text
    assert all(data in text for data in ("hotpotqa/dev500.jsonl", "musique/hipporag_100.json", "fixtures/"))
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    assert {SHIPPED.name, provenance.name} <= set(pyproject["tool"]["setuptools"]["package-data"]["tandem.retrieve"])


def test_ranker_settings_and_bad_model_files(bridge_index, tmp_path):
    assert SHIPPED.is_file() and GraphSettings().ranker == "learned-v2"
    shipped = GraphRetriever(bridge_index, FixedFirstStage())  # the defaults load the shipped model
    assert shipped.ranker is not None and len(shipped.search(QUERY, 5)) == 5
    bad = tmp_path / "bad.txt"
    bad.write_text("tree\nversion=v4\n")
    with pytest.raises(ConfigError, match=r"bad.txt:1: not a tandem graph ranker v2 model"):
        GraphRetriever(bridge_index, FixedFirstStage(), ranker=str(bad))
    with pytest.raises(ConfigError, match="does not exist"):
        GraphRetriever(bridge_index, FixedFirstStage(), ranker=str(tmp_path / "missing.txt"))
    with pytest.raises(ConfigError, match="graph ranker 'learned-v1' is not shipped here: this tandem ships 'learned-v2'"):
        GraphRetriever(bridge_index, FixedFirstStage(), ranker="learned-v1")
    damaged = tmp_path / "damaged.txt"
    damaged.write_text(HEADER + "tree\nversion=v4\nnum_class=1\n")
    with pytest.raises(ConfigError, match=r"damaged.txt: model 1 of the graph ranker is damaged"):
        GraphRetriever(bridge_index, FixedFirstStage(), ranker=str(damaged))
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\xff\xfe\x00model")
    with pytest.raises(ConfigError, match=r"binary.txt: not a tandem graph ranker model \(not UTF-8"):
        GraphRetriever(bridge_index, FixedFirstStage(), ranker=str(binary))
    narrow = tmp_path / "narrow.txt"  # a model over fewer features than this tandem computes (an older ranker's)
    x = np.random.default_rng(0).random((40, 3)).astype(np.float32)
    training.save_ranker(training.train_ranker([(x[i:i + 4], np.array([1, 0, 0, 0], np.float32))
                                                for i in range(0, 40, 4)], rounds=2, bag=1), narrow)
    with pytest.raises(ConfigError, match=rf"narrow.txt: the graph ranker's models read \[3\] features; this tandem "
                                          rf"computes {len(FEATURES)}"):
        GraphRetriever(bridge_index, FixedFirstStage(), ranker=str(narrow))
    with pytest.raises(ConfigError, match=r"graph retriever settings: setting 'entity_hits': Input should be "
                                          r"greater than or equal to 0 \(got -1\)"):
        GraphRetriever(bridge_index, FixedFirstStage(), entity_hits=-1)
    with pytest.raises(ConfigError, match=r"setting 'rerank_depth': Input should be greater than or equal to 1"):
        GraphRetriever(bridge_index, FixedFirstStage(), rerank_depth=0)


def test_the_ranker_reads_the_first_stages_query_vectors(tmp_path):
    """On a hybrid index the ranker's cosine features reuse the vectors the dense part computed: one
    encoding per query batch, not two."""
    from tandem.retrieve import open_retriever
    from tandem.testing.encoders import HashingEncoder

    build_index(BRIDGE_DOCS, tmp_path / "idx", kind="hybrid", encoder=HashingEncoder(),
                extras=[GraphExtra(max_df=1.0, entities=False)])
    idx = open_index(tmp_path / "idx")
    calls = []
    encoder = HashingEncoder()
    encode = encoder.encode
    encoder.encode = lambda texts, **kw: calls.append(list(texts)) or encode(texts, **kw)
    idx.__dict__["encoder"] = encoder
    g = open_retriever(idx, "graph")
    assert g.ranker is not None and len(g.search(QUERY, 5)) == 5
    assert calls == [[QUERY]]
    x = g.features.matrix(g.signals([QUERY], 10), 0, np.array([g.row_of["q1"]]), QUERY)
    assert x[0, FEATURES.index("dense_cosine")] != 0.0


def test_cross_validation_folds_mix_sets_and_hold_one_out():
    """benchmarks/graph_cv.py (graph_retrieval.py's cv mode): question i is in fold i mod 5 in every set; the
    objective weighs sets equally; the grid's fused runs leave the ranker off (it is trained on top of them)."""
    from tests.conftest import benchmark_script

    bench = benchmark_script("graph_cv")
    metrics = bench.METRICS
    rows = {"a": [dict.fromkeys(metrics, float(i % 5 == 0)) for i in range(10)],
            "b": [dict.fromkeys(metrics, 1.0) for _ in range(5)]}
    held = bench.fold_means(rows, {0})
    assert held["a"]["recall@5"] == 100.0 and held["b"]["recall@5"] == 100.0
    assert bench.fold_means(rows, {1, 2, 3, 4})["a"]["recall@5"] == 0.0
    assert bench.objective(bench.fold_means(rows, {1, 2, 3, 4})) == 50.0  # (0 + 100) / 2: each set counts once
    combos = bench.grid_settings()
    assert len(combos) == len({str(sorted(c.items())) for c in combos}) and all(c["ranker"] == "none" for c in combos)
    assert {"expand_hits": 0, "expand_weight": 0.0} in [{k: c[k] for k in ("expand_hits", "expand_weight")} for c in combos]


def test_scale_pool_adds_windows_of_non_gold_passages(monkeypatch):
    """benchmarks/graph_retrieval.py's scale pool: the base pool plus overlapping word windows, titled as their
    source, of every passage that is no dev500 question's gold passage; duplicates dropped by id."""
    from tests.conftest import benchmark_script

    from tandem.types import Document, doc_id_for

    bench = benchmark_script("graph_retrieval")
    words = " ".join(f"w{i}" for i in range(10))
    gold = Document(doc_id_for("Gold", words), "Gold", words)
    other = Document(doc_id_for("Other", words), "Other", words)
    short = Document(doc_id_for("Short", "a b"), "Short", "a b")
    question = Question("q", "?", ("x",), gold_doc_ids=(gold.id,))
    monkeypatch.setattr(bench, "load_set", lambda name: ([question], [gold, other, short]))
    questions, pool = bench.scale_pool("base", 4, 2)
    assert questions == [question] and pool[:3] == [gold, other, short]
    added = pool[3:]
    assert [d.text for d in added] == ["w0 w1 w2 w3", "w2 w3 w4 w5", "w4 w5 w6 w7", "w6 w7 w8 w9"]
    assert all(d.title == "Other" and d.metadata["window_of"] == other.id for d in added)
    assert len({d.id for d in pool}) == len(pool)  # "a b" cut from Short is Short itself: not added twice


ENTITY_DOCS = [
    Document("play", "Brand (play)", "Brand is a verse play written by Henrik Ibsen in Rome."),
    Document("kin", "Nora Ibsen", "Nora Ibsen was a niece of Henrik Ibsen, the Norwegian playwright."),
    *[Document(f"d{i}", f"Other play {i}", f"Other play {i} is a verse drama staged in Bergen.") for i in range(4)],
]


class PlayFirst:
    """A first stage that never returns the passage about the playwright's niece."""

    name = "fixed"

    def search_batch(self, queries, k=10):
        return [[Hit(d, 1.0 / r, r, self.name) for r, d in enumerate(["play", "d0", "d1", "d2", "d3"][:k], 1)]
                for _ in queries]


def test_candidates_add_the_passages_sharing_an_entity_with_the_top(tmp_path):
    """The ranker's candidates: the fused top, then the passages sharing an entity (here "Henrik Ibsen")
    with one of its top entity_hits, though no first-stage list, mention or title link reaches them."""
    build_index(ENTITY_DOCS, tmp_path / "idx", kind="bm25", extras=[GraphExtra(max_df=1.0)])
    g = GraphRetriever(open_index(tmp_path / "idx"), PlayFirst(), ranker="none")
    question = "What country was the author of Brand a citizen of?"
    signals = g.signals([question], 10)
    fused = signals.fused[:, 0]
    assert fused[g.row_of["kin"]] == 0.0  # the fused score alone never ranks it
    rows, core = g.features.candidates(fused, 30, 3)
    assert core == 5 and len(rows) == 6 and rows[-1] == g.row_of["kin"]
    assert list(g.features.candidates(fused, 30, 0)[0]) == list(rows[:5])  # entity_hits=0: the fused top alone
    x = g.features.matrix(signals, 0, rows, question, core)
    col = {name: i for i, name in enumerate(FEATURES)}
    assert x[-1, col["in_fused_top"]] == 0.0 and x[:5, col["in_fused_top"]].tolist() == [1.0] * 5
    assert x[-1, col["entities_with_fused_top"]] == pytest.approx(1.0)  # shares one entity with the top-1 play
    assert x[-1, col["entity_with_fused_top"]] > 0.0 and x[0, col["entity_with_fused_top"]] == 0.0
    ranked = GraphRetriever(open_index(tmp_path / "idx"), PlayFirst())  # the shipped ranker sees it too
    assert "kin" in [h.doc_id for h in ranked.search(question, 10)]
    assert "kin" not in [h.doc_id for h in GraphRetriever(open_index(tmp_path / "idx"), PlayFirst(),
                                                          entity_hits=0).search(question, 10)]
