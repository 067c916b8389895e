"""The passage graph extra and the graph retriever on tiny synthetic corpora."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from tandem.errors import ConfigError
from tandem.index import add_extras, build_index, open_index
from tandem.index.passage_graph import (
    GRAPH_ARRAYS,
    GraphExtra,
    TitleLinker,
    build_graph,
    extract_entities,
    load_graph,
    title_aliases,
)
from tandem.retrieve import open_retriever
from tandem.retrieve.graph import (
    GraphRetriever,
    personalized_pagerank,
    transition_matrix,
)
from tandem.types import Document, Hit


def edges_of(docs: list[Document], **params) -> set[tuple[str, str]]:
    e = build_graph([d.title for d in docs], [d.text for d in docs], {"entities": False, **params})
    return {(docs[i].id, docs[j].id) for i, j in zip(e.src.tolist(), e.dst.tolist(), strict=True)}


def test_title_aliases_strip_suffix_article_comma_and_short_forms():
    assert title_aliases("Kiss and Tell (1945 film)") == {" kiss and tell 1945 film ", " kiss and tell "}
    assert " beatles " in title_aliases("The Beatles")
    assert " summerlin " in title_aliases("Summerlin, Nevada")
    assert " zurich " in title_aliases("Zürich")
    assert title_aliases("UK") == set()  # shorter than min_alias_chars
    assert " uk " in title_aliases("UK", min_chars=2)


def test_mention_edges_follow_titles_and_aliases_at_word_boundaries():
    docs = [
        Document("film", "Kiss and Tell (1945 film)", "Kiss and Tell stars Shirley Temple as Corliss Archer."),
        Document("actor", "Shirley Temple", "Shirley Temple was an actress and later a diplomat."),
        Document("city", "Paris", "Paris is the capital of France."),
        Document("other", "Parisian style", "A Parisian style of cooking; no city named here."),
        Document("town", "Summerlin, Nevada", "Summerlin is a community in Nevada."),
        Document("school", "Faith Lutheran", "Faith Lutheran is a school in Summerlin."),
    ]
    edges = edges_of(docs, max_df=1.0)
    assert ("film", "actor") in edges  # the film's text names the actress
    assert ("actor", "film") not in edges  # her passage does not name the film
    assert ("other", "city") not in edges  # "Parisian" is not "Paris"
    assert ("school", "town") in edges  # alias before the comma
    assert all(a != b for a, b in edges)  # no self loops


def test_frequent_aliases_are_dropped():
    docs = [Document(f"d{i}", f"Doc {i}", "It was a Music event.") for i in range(10)]
    docs.append(Document("music", "Music", "Music is an art."))
    assert any(b == "music" for _, b in edges_of(docs, max_df=1.0))
    assert not any(b == "music" for _, b in edges_of(docs, max_df=0.2))


def test_entity_extractor_and_entity_edges():
    found = extract_entities("She served as Chief of Protocol of the United States under The Rolling Stones.")
    assert {" chief of protocol of the united states ", " united states ", " rolling stones "} <= found
    assert " she " not in found and " chief " not in found
    docs = [Document("a", "A", "Born in New Hampshire."), Document("b", "B", "Moved to New Hampshire later."),
            Document("c", "C", "Nothing shared.")]
    e = build_graph([d.title for d in docs], [d.text for d in docs], {"entities": True})
    assert {(int(s), int(t)) for s, t, k in zip(e.src, e.dst, e.type, strict=True) if k == 1} == {(0, 1), (1, 0)}


def test_ppr_moves_mass_from_seed_to_neighbours():
    graphs = load_graph({"src": np.array([0, 1]), "dst": np.array([1, 2]), "weight": np.ones(2, np.float32),
                         "type": np.zeros(2, np.uint8)}, 4)
    p = transition_matrix(graphs, reverse_weight=0.0, entity_weight=0.0)
    seeds = np.array([[1.0], [0.0], [0.0], [0.0]], dtype=np.float32)
    x = personalized_pagerank(p.T.tocsr(), seeds, np.asarray(p.sum(axis=1)).ravel() == 0, 0.5, 30)
    assert x[0, 0] > x[1, 0] > x[2, 0] > 0 and x[3, 0] == 0  # mass decays along the path, never reaches 3
    assert x.sum() == pytest.approx(1.0, abs=1e-5)  # dangling mass returns to the seeds


BRIDGE_DOCS = [
    Document("q1", "Kiss and Tell (1945 film)", "Kiss and Tell is a comedy film starring Shirley Temple as Corliss Archer."),
    Document("bridge", "Shirley Temple", "Shirley Temple Black was an actress who later served as Chief of Protocol."),
    *[Document(f"n{i}", f"Corliss Archer story {i}", f"Corliss Archer appears in radio play {i} about a kiss.") for i in range(6)],
]


FUSED_ONLY = {"expand_weight": 0.0, "ranker": "none"}  # the PageRank fusion alone, as before the expansion


class FixedFirstStage:
    """A first stage that returns the same ranking for every query: the film, then the distractors."""

    name = "fixed"

    def search_batch(self, queries, k=10):
        order = ["q1", *[f"n{i}" for i in range(6)], "bridge"]
        return [[Hit(d, 1.0 / r, r, self.name) for r, d in enumerate(order[:k], 1)] for _ in queries]

    def search(self, query, k=10):
        return self.search_batch([query], k)[0]


def test_graph_retriever_ranks_the_bridge_passage_up(tmp_path):
    build_index(BRIDGE_DOCS, tmp_path / "idx", kind="bm25", extras=[GraphExtra(max_df=1.0)])
    idx = open_index(tmp_path / "idx")
    query = "What position did the woman who played Corliss Archer in Kiss and Tell hold?"
    first = [h.doc_id for h in FixedFirstStage().search(query, 10)]
    assert first.index("bridge") >= 5
    hits = GraphRetriever(idx, FixedFirstStage(), seeds=2, fusion_weight=0.5).search(query, 5)
    ranked = [h.doc_id for h in hits]
    assert ranked[0] == "q1" and "bridge" in ranked[:3]
    assert all(h.source == "graph" for h in hits) and [h.rank for h in hits] == [1, 2, 3, 4, 5]
    # fusion_weight 0 without the link boost, the expansion and the ranker is the first stage again
    plain = GraphRetriever(idx, FixedFirstStage(), fusion_weight=0.0, link_boost=0.0, **FUSED_ONLY)
    assert [h.doc_id for h in plain.search(query, 8)] == first


def test_graph_retriever_through_open_retriever_with_bm25_first_stage(tmp_path):
    build_index(BRIDGE_DOCS, tmp_path / "idx", kind="bm25", extras=[GraphExtra(max_df=1.0)])
    retriever = open_retriever(tmp_path / "idx", "graph", seeds=1, fusion_weight=0.6)
    hits = retriever.search("Kiss and Tell 1945 comedy film", 3)
    assert [h.doc_id for h in hits][:2] == ["q1", "bridge"]
    with pytest.raises(ConfigError, match=r"graph retriever settings: unknown setting .dampening.; valid settings: \[.damping."):
        open_retriever(tmp_path / "idx", "graph", dampening=0.5)
    with pytest.raises(ConfigError, match="two_hop needs a dense component"):
        open_retriever(tmp_path / "idx", "graph", two_hop=True)


def test_manifest_records_graph_params_and_add_extras_round_trip(tmp_path):
    build_index(BRIDGE_DOCS, tmp_path / "plain", kind="bm25")
    assert not open_index(tmp_path / "plain").manifest.extras
    add_extras(tmp_path / "plain", [GraphExtra(max_df=0.5, entities=False)], out=tmp_path / "with-graph")
    assert not open_index(tmp_path / "plain").manifest.extras  # the source is left as it was
    idx = open_index(tmp_path / "with-graph")
    params = idx.manifest.params["graph"]
    assert params["max_df"] == 0.5 and params["entities"] is False and params["entity_edges"] == 0
    assert params["mention_edges"] == int((idx.extra("graph_type") == 0).sum()) > 0
    assert set(GRAPH_ARRAYS) <= set(idx.manifest.extras)
    assert idx.manifest.params["bm25"] == open_index(tmp_path / "plain").manifest.params["bm25"]
    add_extras(tmp_path / "with-graph", [GraphExtra(max_df=1.0)])  # in place, replacing the arrays
    assert open_index(tmp_path / "with-graph").manifest.params["graph"]["max_df"] == 1.0
    with pytest.raises(ConfigError, match="unknown graph settings"):
        GraphExtra(max_dff=1)


def test_graph_retriever_on_index_without_graph_says_how_to_add_it(tmp_path):
    build_index(BRIDGE_DOCS, tmp_path / "idx", kind="bm25")
    with pytest.raises(ConfigError, match=r"--add-extras graph --index"):
        open_retriever(tmp_path / "idx", "graph")

    from tandem.cli import app

    res = CliRunner().invoke(app, ["retrieve", "Shirley Temple", "--index", str(tmp_path / "idx"), "--retriever", "graph"])
    assert res.exit_code != 0 and isinstance(res.exception, ConfigError)
    assert "tandem index --add-extras graph --index" in str(res.exception)
    ok = CliRunner().invoke(app, ["index", "--add-extras", "graph", "--index", str(tmp_path / "idx")])
    assert ok.exit_code == 0, ok.output
    res = CliRunner().invoke(app, ["retrieve", "Shirley Temple", "--index", str(tmp_path / "idx"), "--retriever", "graph",
                                   "--retriever-opt", "seeds=2", "-k", "2"])
    assert res.exit_code == 0, res.output
    assert "Shirley Temple" in res.output


def test_add_extras_to_a_copy_never_writes_through_to_the_source(tmp_path):
    build_index(BRIDGE_DOCS, tmp_path / "a", kind="bm25", extras=[GraphExtra(max_df=1.0)])
    before = {n: np.array(open_index(tmp_path / "a").extra(n)) for n in GRAPH_ARRAYS}
    add_extras(tmp_path / "a", [GraphExtra(max_df=1.0, entities=False)], out=tmp_path / "b")  # files hard-linked
    after = open_index(tmp_path / "a")
    assert after.manifest.params["graph"]["entities"] is True
    assert all(np.array_equal(before[n], after.extra(n)) for n in GRAPH_ARRAYS)
    assert open_index(tmp_path / "b").manifest.params["graph"]["entity_edges"] == 0


def test_every_method_can_search_through_the_graph(tmp_path):
    from tandem.compose import build_run as build_one
    from tandem.config import RetrieverConfig
    from tandem.testing.fake_llm import FakeLLM
    from tandem.types import Question

    build_index(BRIDGE_DOCS, tmp_path / "idx", kind="bm25", extras=[GraphExtra(max_df=1.0)])
    retriever = RetrieverConfig.from_dict({"kind": "graph", "settings": {"seeds": 2}})
    method = build_one("ircot", FakeLLM(default="So the answer is: x."), open_index(tmp_path / "idx"),
                            {"k": 2}, retriever=retriever).method
    assert method.search.retriever.name == "graph"
    answer = method.answer(Question("q", "Where was the director of Example Film born?"))
    assert answer.trace.steps[0].hits and all(h.source == "graph" for h in answer.trace.steps[0].hits)


def test_methods_that_prefer_the_dense_part_keep_an_explicit_graph_retriever(tmp_path):
    """DualRAG's keyword search and CoopRAG's first stage replace the index's own kind by its dense part
    (the papers' setting), but keep a retriever chosen otherwise: --retriever graph is what they search."""
    from tandem.compose import build_method
    from tandem.methods import Search
    from tandem.testing.encoders import HashingEncoder
    from tandem.testing.fake_llm import FakeLLM

    build_index(BRIDGE_DOCS, tmp_path / "idx", kind="hybrid", encoder=HashingEncoder(), extras=[GraphExtra(max_df=1.0)])
    idx = open_index(tmp_path / "idx")
    idx.__dict__["encoder"] = HashingEncoder()
    for method in ("dualrag", "cooprag"):
        graph = build_method(method, FakeLLM(), Search(open_retriever(idx, "graph"), idx.store), reranker="none")
        assert graph.search.retriever.name == "graph"
        own = build_method(method, FakeLLM(), Search(open_retriever(idx), idx.store), reranker="none")
        assert own.search.retriever.name == "dense"


def test_title_linker_finds_the_passages_a_question_names():
    titles = ["Scott Derrickson", "Ed Wood", "Ed Wood (film)", "Edward Woodward", "Doctor Strange (2016 film)", "UK"]
    linker = TitleLinker(titles)
    assert linker.rows("Were Scott Derrickson and Ed Wood of the same nationality?") == [0, 1, 2]
    assert linker.rows("Who directed Doctor Strange?") == [4]  # the disambiguation suffix is stripped
    assert linker.rows("Is Edward Wood British?") == []  # whole aliases at word boundaries only
    assert linker.rows("Which UK city?") == []  # shorter than min_alias_chars
    assert TitleLinker([]).rows("anything") == []


COMPARISON_DOCS = [
    Document("derrickson", "Scott Derrickson", "Scott Derrickson is an American director."),
    *[Document(f"d{i}", f"Horror film {i}", f"Horror film {i} has a director of the same nationality.") for i in range(5)],
    Document("wood", "Ed Wood", "Edward Davis Wood Jr. was an American filmmaker."),
]


class ComparisonFirstStage(FixedFirstStage):
    """Ranks the first named passage on top, the second behind five distractors."""

    def search_batch(self, queries, k=10):
        order = ["derrickson", *[f"d{i}" for i in range(5)], "wood"]
        return [[Hit(d, 1.0 / r, r, self.name) for r, d in enumerate(order[:k], 1)] for _ in queries]


@pytest.mark.parametrize("links", [{"link_boost": 0.5}, {"link_seeds": 3.0}])
def test_passages_the_question_names_are_seeded_and_boosted(tmp_path, links):
    build_index(COMPARISON_DOCS, tmp_path / "idx", kind="bm25", extras=[GraphExtra(max_df=1.0)])
    idx = open_index(tmp_path / "idx")
    query = "Were Scott Derrickson and Ed Wood of the same nationality?"
    plain = GraphRetriever(idx, ComparisonFirstStage(), seeds=2, link_seeds=0.0, link_boost=0.0, **FUSED_ONLY).search(query, 7)
    assert [h.doc_id for h in plain].index("wood") >= 5
    settings = {"seeds": 2, "link_seeds": 0.0, "link_boost": 0.0, **FUSED_ONLY, **links}
    linked = GraphRetriever(idx, ComparisonFirstStage(), **settings).search(query, 7)
    assert {h.doc_id for h in linked[:2]} == {"derrickson", "wood"}
    # a question that names nothing is ranked as without links
    other = "Which director shares a nationality?"
    same = GraphRetriever(idx, ComparisonFirstStage(), **settings).search(other, 7)
    assert [h.doc_id for h in same] == [h.doc_id for h in plain]
    with pytest.raises(ConfigError, match=r"setting 'link_boost': Input should be greater than or equal to 0"):
        GraphRetriever(idx, ComparisonFirstStage(), link_boost=-0.1)


def test_bridge_expansion_lifts_the_passages_the_top_hits_name(tmp_path):
    """expand_hits: the passages whose title a top first-stage hit mentions gain expand_weight / rank, damped by
    the hit's out-degree; with the graph term off, nothing else moves."""
    build_index(BRIDGE_DOCS, tmp_path / "idx", kind="bm25", extras=[GraphExtra(max_df=1.0, entities=False)])
    idx = open_index(tmp_path / "idx")
    query = "What position did the woman who played Corliss Archer hold?"
    off = {"fusion_weight": 0.0, "link_boost": 0.0, "link_seeds": 0.0, "ranker": "none"}
    plain = GraphRetriever(idx, FixedFirstStage(), **off, expand_weight=0.0).search(query, 8)
    assert plain[-1].doc_id == "bridge"
    expanded = GraphRetriever(idx, FixedFirstStage(), **off, expand_hits=1, expand_weight=0.5).search(query, 8)
    assert [h.doc_id for h in expanded][:2] == ["q1", "bridge"]
    assert expanded[1].score - plain[-1].score == pytest.approx(0.5, abs=1e-6)  # rank-1 parent: the whole weight
    # the film names only the bridge (out-degree 1), so hub damping leaves it; a hit at rank 2 gives half
    damped = GraphRetriever(idx, FixedFirstStage(), **off, expand_hits=1, expand_weight=0.5, hub_damping=1.0)
    assert [h.doc_id for h in damped.search(query, 8)] == [h.doc_id for h in expanded]
    with pytest.raises(ConfigError, match=r"setting 'expand_weight': Input should be greater than or equal to 0"):
        GraphRetriever(idx, FixedFirstStage(), expand_weight=-1.0)
    with pytest.raises(ConfigError, match=r"seeds \(9\) must not exceed depth \(5\)"):
        GraphRetriever(idx, FixedFirstStage(), seeds=9, depth=5)
    with pytest.raises(ConfigError, match=r"unknown setting 'first_stage'; valid settings: \['damping'"):
        GraphRetriever(idx, FixedFirstStage(), first_stage="bm25")  # open_retriever's setting: the stage comes built


def test_expansion_matrix_spreads_a_hubs_vote():
    from scipy import sparse

    from tandem.retrieve.graph import expansion_matrix

    mention = sparse.csr_matrix(np.array([[0, 1, 1, 1], [0, 0, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]], np.float32))
    parents = np.array([[1.0], [1.0], [0.0], [0.0]], np.float32)
    assert (expansion_matrix(mention, 0.0) @ parents).ravel().tolist() == [0.0, 1.0, 2.0, 1.0]
    damped = (expansion_matrix(mention, 1.0) @ parents).ravel()
    assert damped == pytest.approx([0.0, 1 / 3, 1 / 3 + 1.0, 1 / 3])


def test_question_answering_defaults_to_the_graph_where_the_index_has_it_and_paper_presets_keep_the_index_kind(tmp_path):
    from tandem.compose import build_run as build_one
    from tandem.config import RunConfig
    from tandem.eval.run import build_run
    from tandem.llm.fake import FakeLLM
    from tandem.retrieve import best_retriever

    build_index(BRIDGE_DOCS, tmp_path / "idx", kind="bm25")
    plain = open_index(tmp_path / "idx")
    assert best_retriever(plain) == "bm25"
    method = build_one("naive_rag", FakeLLM(default="x"), plain).method
    assert method.search.retriever.name == "bm25"
    add_extras(tmp_path / "idx", [GraphExtra(max_df=1.0)])
    graph = open_index(tmp_path / "idx")
    assert best_retriever(graph) == "graph"
    method = build_one("naive_rag", FakeLLM(default="x"), graph).method
    assert method.search.retriever.name == "graph"
    answer = method.answer(__import__("tandem.types", fromlist=["Question"]).Question("q", "Who starred in Kiss and Tell?"))
    assert answer.trace.steps[0].hits and {h.source for h in answer.trace.steps[0].hits} == {"graph"}
    named = RunConfig.from_dict({"method": "naive_rag", "index": str(tmp_path / "idx"), "llm": {"spec": "fake:x"},
                                 "retriever": {"kind": "bm25"}})
    assert build_run(named)[0].search.retriever.name == "bm25"  # a named retriever is kept
    # DualRAG's paper preset searches with the run's retriever (no first stage of its own): the index's kind
    paper = RunConfig.from_dict({"method": "dualrag", "index": str(tmp_path / "idx"), "llm": {"spec": "fake:x"},
                                 "preset": "paper"})
    assert build_run(paper)[0].search.retriever.name == "bm25"
    plain_dual = RunConfig.from_dict({"method": "dualrag", "index": str(tmp_path / "idx"), "llm": {"spec": "fake:x"}})
    assert build_run(plain_dual)[0].search.retriever.name == "graph"


def test_an_index_built_without_the_graph_names_the_command_that_makes_it_the_default(tmp_path):
    from tandem.cli import app
    from tandem.retrieve.opener import best_retriever

    corpus = tmp_path / "bridge.jsonl"
    corpus.write_text("".join(f'{{"id": "{d.id}", "title": "{d.title}", "text": "{d.text}"}}\n' for d in BRIDGE_DOCS))
    built = CliRunner().invoke(app, ["index", "--corpus", str(corpus), "--kind", "bm25", "--out", str(tmp_path / "idx")])
    assert built.exit_code == 0, built.output
    hint = f"tandem index --add-extras graph --index {tmp_path / 'idx'}"
    assert hint in built.output
    assert best_retriever(open_index(tmp_path / "idx")) == "bm25"
    ok = CliRunner().invoke(app, hint.split()[1:])
    assert ok.exit_code == 0, ok.output
    assert best_retriever(open_index(tmp_path / "idx")) == "graph"
    with_graph = CliRunner().invoke(app, ["index", "--corpus", str(corpus), "--kind", "bm25", "--extras", "graph",
                                          "--out", str(tmp_path / "idx2")])
    assert with_graph.exit_code == 0 and "--add-extras" not in with_graph.output
