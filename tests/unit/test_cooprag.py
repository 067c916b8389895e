"""CoopRAG's control flow with the scripted fake LLM: unroll -> retrieve -> rerank -> complete -> answer,
parse fallbacks, the one-call variant and the ablation switches (the query U)."""

from __future__ import annotations

import pytest

from tandem.compose import build_method
from tandem.errors import ConfigError, ParseError
from tandem.index import build_index, open_index
from tandem.index.store import DocStore
from tandem.methods import Search
from tandem.methods.cooprag import prompts as P
from tandem.methods.cooprag.algorithm import CoopRAG, render_query
from tandem.methods.cooprag.settings import CoopRAGSettings
from tandem.registry import METHODS
from tandem.retrieve import open_retriever
from tandem.testing.encoders import HashingEncoder
from tandem.testing.fake_llm import FakeLLM
from tandem.types import Hit, Question

UNROLL = (
    '{"hop_count": 2, "structure": "find the mother, then her birthplace.", '
    '"sub_questions": ["Who was the mother of Irene Curie?", "Where was Marie Curie born?"], '
    '"chain": [["Irene Curie", "mother", "<UNCERTAIN>"], ["<UNCERTAIN>", "born in", "<FILL>"]]}'
)
COMPLETED = '{"chain": [["Irene Curie", "mother", "Marie Curie"], ["Marie Curie", "born in", "Warsaw"]]}'
QUESTION = Question("q1", "Where was the mother of Irene Curie born?", ("Warsaw",))


class ListRetriever:
    """Returns the store's documents in a fixed order; records its queries."""

    name = "list"

    def __init__(self, order: list[str]) -> None:
        self.order, self.queries = order, []

    def search(self, query: str, k: int = 10) -> list[Hit]:
        self.queries.append((query, k))
        return [Hit(d, 1.0 - i / 10, i + 1, self.name) for i, d in enumerate(self.order[:k])]

    def search_batch(self, queries, k=10):
        return [self.search(q, k) for q in queries]


class ReverseReranker:
    name = "reverse"

    def __init__(self) -> None:
        self.queries = []

    def rerank(self, query, hits, k=None):
        self.queries.append(query)
        return [Hit(h.doc_id, float(i), i + 1, self.name) for i, h in enumerate(list(reversed(hits))[:k])]


@pytest.fixture
def setup(small_docs):
    store = DocStore(small_docs)
    retriever = ListRetriever([d.id for d in small_docs])
    return Search(retriever, store), retriever


def test_pipeline_unroll_retrieve_rerank_complete_answer(setup):
    search, retriever = setup
    reranker = ReverseReranker()
    llm = FakeLLM([UNROLL, COMPLETED, "Answer: Warsaw."])
    ans = CoopRAG(llm, search, reranker, CoopRAGSettings(n=4, k=2)).answer(QUESTION)
    assert ans.text == "Warsaw" and ans.method == "cooprag"
    assert [s.name for s in ans.trace.steps] == ["unroll", "retrieve", "rerank", "complete", "answer"]
    assert [c.role for c in ans.trace.llm_calls] == ["unroll", "complete", "answer"]
    u = ("Where was the mother of Irene Curie born? Who was the mother of Irene Curie? Where was Marie Curie born? "
         "Irene Curie mother. born in")
    assert retriever.queries == [(u, 4)] and reranker.queries == [u]
    assert [h.doc_id for h in ans.trace.steps[2].hits] == ["d4", "d3"]
    assert ans.trace.docs_read == ["d4", "d3"]
    complete_prompt = llm.calls[1].last_user
    assert complete_prompt.index("(Title: Vistula)") < complete_prompt.index("(Title: Warsaw)")
    assert "SUB_Q2: Where was Marie Curie born?" in complete_prompt and "<UNCERTAIN>" in complete_prompt
    assert "Marie Curie" in llm.calls[2].last_user and "<FILL>" not in llm.calls[2].last_user
    assert ans.trace.steps[0].notes["sub_questions"][0] == "Who was the mother of Irene Curie?"
    assert ans.trace.steps[3].notes["chain"][-1] == ["Marie Curie", "born in", "Warsaw"]


@pytest.mark.parametrize("shared", [False, True])
def test_shared_context_has_the_answer_prompt_begin_as_the_completion_prompt_did(setup, shared):
    search, _ = setup
    llm = FakeLLM([UNROLL, COMPLETED, "Answer: Warsaw."])
    ans = CoopRAG(llm, search, None, CoopRAGSettings(k=2, shared_context=shared)).answer(QUESTION)
    complete, answer = ans.trace.llm_calls[1:]
    (c_system, c_user), (a_system, a_user) = complete.messages, answer.messages
    documents = P.format_documents([search.store.get(h.doc_id) for h in ans.trace.steps[2].hits])
    assert c_user["content"].startswith(documents) and a_user["content"].startswith(documents)
    assert (c_system == a_system) == shared  # one system message: the answer's prompt extends the same prefix
    if shared:
        # the fake LLM has no answer style of its own: ``instruction``, the answer's brief system prompt
        assert P.COMPLETE_SYSTEM in c_system["content"] and P.ANSWER_SYSTEM_BRIEF in c_system["content"]
    assert ans.text == "Warsaw"


@pytest.mark.parametrize("shared", [False, True])
def test_the_answer_names_yes_or_no_only_for_a_question_that_asks_it_on_an_instruction_style_model(setup, shared):
    search, _ = setup
    yes_no = Question("q2", "Was the mother of Irene Curie born in Warsaw?", ("yes",))
    prompts = {}
    for style in ("system", "instruction_yes_no"):
        for question in (QUESTION, yes_no):
            llm = FakeLLM([UNROLL, COMPLETED, "Answer: Warsaw."])
            llm.answer_style = style  # the local backend sets it from the model's ladder entry
            ans = CoopRAG(llm, search, None, CoopRAGSettings(k=2, shared_context=shared)).answer(question)
            system, user = ans.trace.llm_calls[2].messages
            prompts[style, question.id] = (system["content"], user["content"])
            if shared:  # the completion's prompt begins as the answer's does
                assert ans.trace.llm_calls[1].messages[0] == system
    for qid in ("q1", "q2"):  # the paper's wording for a model of the system style (SmolLM2)
        system, user = prompts["system", qid]
        assert "asks yes or no, answer yes or no" in system and user.endswith("\nAnswer:")
        assert P.BRIEF_INSTRUCTION not in user
    system, user = prompts["instruction_yes_no", "q1"]  # a question that asks neither: yes/no is never named
    assert "yes" not in system.lower() and "yes or no" not in user.lower()
    assert user.endswith(f"{P.BRIEF_INSTRUCTION}\nAnswer:")
    assert prompts["instruction_yes_no", "q2"][1].endswith("Answer yes or no.\nAnswer:")


def test_unroll_parse_failure_falls_back_to_question_only(setup):
    search, retriever = setup
    llm = FakeLLM(["I am not sure.", "Sub-questions: none", "still nothing", "Answer: Paris"])
    ans = CoopRAG(llm, search, None, CoopRAGSettings(k=2, unroll_attempts=3)).answer(QUESTION)
    unroll = ans.trace.steps[0]
    assert len(unroll.llm_calls) == 3 and unroll.notes["fallbacks"] == ["unroll: question only: no sub-questions and no chain"]
    assert [c.role for c in unroll.llm_calls] == ["unroll", "unroll:retry", "unroll:retry"]
    assert unroll.llm_calls[-1].outcome == "fallback" and ans.trace.protocol()["unroll"]["fell_back"] == 1
    assert len(unroll.notes["parse_errors"]) == 3 and unroll.notes["chain"] == []
    assert retriever.queries == [(QUESTION.text, 2)]
    assert [c.temperature for c in llm.calls[:3]] == [0.0, 0.7, 0.7] and [c.seed for c in llm.calls[:3]] == [None, 1, 2]
    # no chain to complete: the completion call is skipped, the answer call still runs
    assert ans.trace.steps[2].notes["skipped"] == "no chain to complete" and not ans.trace.steps[2].llm_calls
    assert ans.text == "Paris" and len(llm.calls) == 4


def test_completion_failure_keeps_masked_chain_and_empty_answer_uses_chain_tail(setup):
    search, _ = setup
    llm = FakeLLM([UNROLL, "no list", ""], default="")
    ans = CoopRAG(llm, search, None, CoopRAGSettings(k=2, complete_attempts=1)).answer(QUESTION)
    complete = ans.trace.steps[2]
    assert complete.name == "complete" and complete.notes["chain"][-1][2] == "<FILL>"
    assert ans.text == "" and ans.trace.steps[-1].notes["fallbacks"][0].startswith("answer: empty answer")
    assert ans.trace.protocol()["complete"] == {"calls": 1, "schema_decoded": 0, "parsed_first": 0, "repaired": 0,
                                                "fell_back": 1}
    llm = FakeLLM([UNROLL, COMPLETED, "Answer:"])
    ans = CoopRAG(llm, search, None, CoopRAGSettings(k=2)).answer(QUESTION)
    assert ans.text == "Warsaw" and ans.trace.steps[-1].notes["fallbacks"][0].startswith("answer: empty answer")


def test_one_call_variant(setup):
    search, _ = setup
    llm = FakeLLM([UNROLL, COMPLETED[:-1] + ', "answer": "Warsaw."}'])
    ans = CoopRAG(llm, search, ReverseReranker(), CoopRAGSettings(n=5, k=3, one_call=True)).answer(QUESTION)
    assert [s.name for s in ans.trace.steps] == ["unroll", "retrieve", "rerank", "complete+answer"]
    assert [c.role for c in ans.trace.llm_calls] == ["unroll", "one_call"] and ans.text == "Warsaw"
    assert ans.trace.steps[-1].notes["chain"][0] == ["Irene Curie", "mother", "Marie Curie"]


@pytest.mark.parametrize(("parts", "has_sub", "has_chain"),
                         [("q", False, False), ("q+s", True, False), ("q+r", False, True), ("q+s+r", True, True)])
def test_ablation_switches_change_the_query(setup, parts, has_sub, has_chain):
    search, retriever = setup
    CoopRAG(FakeLLM([UNROLL, COMPLETED, "Warsaw"]), search, None, CoopRAGSettings(k=2, query=parts)).answer(QUESTION)
    query = retriever.queries[0][0]
    assert query.startswith(QUESTION.text)
    assert ("Where was Marie Curie born?" in query) == has_sub
    assert ("born in" in query) == has_chain


def test_render_query_masks_setting():
    unrolled = P.parse_unrolled(UNROLL)
    assert "<UNCERTAIN>" not in render_query("Q?", unrolled)
    kept = render_query("Q?", unrolled, "q+r", masks="keep")
    assert kept == "Q? Irene Curie mother <UNCERTAIN>. <UNCERTAIN> born in <FILL>"


def test_parsers_tolerate_small_model_output():
    sloppy = ("Here it is:\n```json\n{'hop_count': 2, sub_questions: ['A?', 'B?',], 'chain': [['x', 'r', '<FILL>'], "
              "['too', 'short']]}\n```")
    u = P.parse_unrolled(sloppy)
    assert u.sub_questions == ("A?", "B?") and u.chain == (("x", "r", "<FILL>"),)
    with pytest.raises(ParseError):
        P.parse_unrolled('{"sub_questions": ["A?"]}')
    with pytest.raises(ParseError):
        P.parse_unrolled('{"sub_questions": [], "chain": [["a","b","c"]]}')
    with pytest.raises(ParseError):
        P.parse_one_call('{"chain": [["a","b","c"]]}')
    assert P.parse_answer("Answer: <<FILL>>Yes<<FILL>>") == "Yes"
    assert P.parse_answer("Answer: The Vistula.\nBecause ...") == "The Vistula"
    assert P.parse_answer("Warsaw") == "Warsaw"
    assert P.parse_answer('Completed Chain: [["a", "b", "c"]]\nWarsaw') == "Warsaw"
    assert P.parse_completed(f"Completed Chain: {COMPLETED}\nAnswer: Warsaw")[1][2] == "Warsaw"
    assert P.chain_answer(((("a", "b", "<FILL>")),)) == ""


def test_registered_and_built_from_settings(small_docs, tmp_path):
    assert "cooprag" in METHODS and "index" in METHODS.get("cooprag").needs
    build_index(small_docs, tmp_path / "idx", kind="hybrid", encoder=HashingEncoder())
    idx = open_index(tmp_path / "idx")
    idx.__dict__["encoder"] = HashingEncoder()  # the test encoder is not loadable by name
    search = Search(open_retriever(idx), idx.store)
    method = build_method("cooprag", FakeLLM([UNROLL, COMPLETED, "Answer: Warsaw"]), search, reranker="none", k=2)
    assert method.search.retriever.name == "dense"
    ans = method.answer(QUESTION)
    assert ans.text == "Warsaw" and len(ans.trace.docs_read) == 2
    with pytest.raises(ConfigError, match="setting 'query': Input should be 'q', 'q\\+s'"):
        build_method("cooprag", FakeLLM(), search, reranker="none", query="q+x")
    with pytest.raises(ConfigError):
        build_method("cooprag", FakeLLM(), search, reranker="cross")


def test_an_explicit_retriever_is_honoured(small_docs, tmp_path):
    """first_stage=dense replaces only the index's own kind: --retriever bm25 (or graph) on a hybrid index stays."""
    build_index(small_docs, tmp_path / "idx", kind="hybrid", encoder=HashingEncoder())
    idx = open_index(tmp_path / "idx")
    idx.__dict__["encoder"] = HashingEncoder()
    for kind, used in (("hybrid", "dense"), ("bm25", "bm25")):
        search = Search(open_retriever(idx, kind), idx.store)
        method = build_method("cooprag", FakeLLM(), search, reranker="none", k=2)
        assert method.search.retriever.name == used
