"""DualRAG driven by scripted fake LLMs: role LLMs and settings, answer styles, the rendered trace, and what
the answer reads (outline, the question's own hits, the best passages read)."""

from __future__ import annotations

import pytest
from dualrag_script import QUESTION, RecordingReranker, Roles, plan, think, two_hop_roles

from tandem.compose import build_method
from tandem.errors import ConfigError
from tandem.index import build_index, open_index
from tandem.llm.base import LLMRequest, Message
from tandem.methods import Search
from tandem.methods.dualrag import DualRAG
from tandem.methods.dualrag import parse as R
from tandem.methods.dualrag import prompts as P
from tandem.methods.dualrag.settings import DualRAGSettings
from tandem.rerank import BiEncoderReranker
from tandem.retrieve import open_retriever
from tandem.testing.encoders import HashingEncoder
from tandem.testing.fake_llm import FakeLLM


def test_role_llms_and_settings(tmp_path, small_docs):
    build_index(small_docs, tmp_path / "idx", kind="hybrid", encoder=HashingEncoder())
    idx = open_index(tmp_path / "idx")
    idx.__dict__["encoder"] = HashingEncoder()  # the test encoder is not loadable by name
    search = Search(open_retriever(idx), idx.store)
    llm = FakeLLM(default="x")
    method = build_method("dualrag", llm, search, role_llms={"answer": "fake"}, max_iter=2)
    assert method.search.retriever.name == "dense"  # keyword search is dense on a hybrid index
    assert isinstance(method.reranker, BiEncoderReranker) and len(method.reranker.doc_vectors) == 5
    assert method.reranker.doc_vectors[[4, 0]].shape == (2, 64)
    assert method.llms["answer"] is llm and method.max_iter == 2
    assert build_method("dualrag", llm, search, reranker="none", keyword_retriever="index").reranker is None
    assert build_method("dualrag", llm, search, keyword_retriever="index").search.retriever.name == "hybrid"
    other = build_method("dualrag", llm, search, role_llms={"summarizer": "fake:short"})
    assert other.llms["summarizer"] is not llm and other.llms["reasoner"] is llm
    with pytest.raises(ConfigError, match="roles"):
        build_method("dualrag", llm, search, role_llms={"planner": "fake"})
    scripted = build_method("dualrag", llm, search, role_llms={"summarizer": {"spec": "fake", "responses": ["n"]}})
    assert scripted.llms["summarizer"].complete(LLMRequest([Message("user", "q")])).text == "n"  # the role's own options
    with pytest.raises(ConfigError, match="role_llms\\['summarizer'\\]: a mapping needs 'spec'"):
        build_method("dualrag", llm, search, role_llms={"summarizer": {"dtype": "bfloat16"}})
    with pytest.raises(ConfigError, match="role_llms\\['answer'\\]: .*'nonsense'"):
        build_method("dualrag", llm, search, role_llms={"answer": {"spec": "fake", "nonsense": 1}})
    with pytest.raises(ConfigError, match="reranker_model"):
        build_method("dualrag", llm, search, reranker="cross_encoder")
    with pytest.raises(ConfigError, match="reranker"):
        build_method("dualrag", llm, search, reranker="colbert")
    with pytest.raises(ConfigError, match="unknown setting 'nonsense'; valid settings: \\['answer_docs'"):
        build_method("dualrag", llm, search, nonsense=1)
    with pytest.raises(ConfigError, match="index"):
        build_method("dualrag", llm)


def test_answer_styles(search):
    roles = Roles(reasoner=[think("done", False)], answer=["Answer: the Vistula.\nBecause..."])
    assert roles.method(search, knowledge_first=False).answer(QUESTION).text == "the Vistula"
    roles = Roles(reasoner=[think("done", False)], answer=["The river is the Vistula.\nIt flows through Warsaw."])
    assert roles.method(search, answer_style="complete", knowledge_first=False).answer(QUESTION).text.endswith("flows through Warsaw.")
    assert "complete answer" in roles.prompts("answer")[0]
    with pytest.raises(ConfigError, match="setting 'answer_style': Input should be 'short' or 'complete'"):
        roles.method(search, answer_style="long")


def test_rendered_trace_shows_steps_and_indented_outline(search):
    from rich.console import Console

    from tandem.render import render_trace

    ans = two_hop_roles().method(search).answer(QUESTION)
    console = Console(record=True, width=200)
    console.print(render_trace(ans, search.store))
    text = console.export_text()
    assert "step 1: iteration 1" in text and "step 4: answer" in text
    assert "    #### Marie Curie" in text and "    Warsaw is the capital of Poland on the Vistula river." in text
    assert "    Marie Curie: ['Marie Curie', " in text  # hits per entity shown as titles
    assert "answer: Vistula" in text


def test_entity_cap_follows_max_entities(search):
    """No cap in the paper: null leaves only the grammar's bound (P.DECODED_ENTITIES) on a schema-decoded reply
    and none on a prompt-only one; a cap n becomes the schema's maxItems and cuts the list."""
    llm = FakeLLM(default="x")
    uncapped = DualRAG(llm, search, DualRAGSettings())
    capped = DualRAG(llm, search, DualRAGSettings(max_entities=2))
    entities = lambda m: m.roles["entity_identifier"].bounded["properties"]["entities"]["maxItems"]  # noqa: E731
    assert entities(uncapped) == P.DECODED_ENTITIES == 5 and entities(capped) == 2
    six = plan(*[(f"Entity {i}", [f"keyword {i}"]) for i in range(6)])
    assert len(R.parse_entities(six)) == 6  # parsing caps nothing


def test_while_nothing_is_read_the_question_is_searched_too(search):
    roles = Roles(reasoner=[think("need Marie Curie"), think("done", False)],
                  entity=[plan(("Star Wars", ["Star Wars books"]))], summarizer=["Marie Curie was born in Warsaw.", "None"])
    ans = roles.method(search, question_query=True).answer(QUESTION)
    first = ans.trace.steps[0]
    assert first.notes["entities"] == {"Star Wars": ["Star Wars books"], P.ELSE_ENTITY: [QUESTION.text]}
    assert QUESTION.text in first.queries and "d1" in first.notes["hits"][P.ELSE_ENTITY]  # the question finds Marie Curie
    # once something is read, the plan is the Entity Identifier's alone
    roles = Roles(reasoner=[think("need Marie Curie"), think("need the river"), think("done", False)],
                  entity=[plan(("Marie Curie", ["Marie Curie"])), plan(("Warsaw", ["Warsaw river"]))],
                  summarizer=["Marie Curie was born in Warsaw.", "Warsaw is on the Vistula.", "None"])
    ans = roles.method(search, question_query=True).answer(QUESTION)
    assert ans.trace.steps[1].notes["entities"] == {"Warsaw": ["Warsaw river"]}


def test_the_questions_own_hits_lead_what_else_reads_whatever_the_reranker_makes_of_them(search):
    """What NativeRAG reads (the run's retriever, the question, top question_docs) is read at the first step
    even where the reranker of the keyword pool would put it below k; question_docs=0: the pool alone."""
    native = [h.doc_id for h in search.retriever.search(QUESTION.text, 2)]

    def first_else(**hyper) -> list[str]:
        roles = Roles(reasoner=[think("need Marie Curie"), think("done", False)],
                      entity=[plan((P.ELSE_ENTITY, ["Vistula river"]))], summarizer=["Marie Curie was born in Warsaw."])
        ans = roles.method(search, question_query=True, k=2, reranker=RecordingReranker(), **hyper).answer(QUESTION)
        return ans.trace.steps[0].notes["hits"][P.ELSE_ENTITY]

    assert first_else(question_docs=2) == native  # both lead, the reversed pool fills nothing more of k=2
    led = first_else(question_docs=1)
    assert led[0] == native[0] and len(led) == 2
    assert first_else(question_docs=3) == native[:2]  # more than k: the question's top k, still k in all
    assert first_else(question_docs=0) != native  # the reranker's own order (it reverses the pool)


def test_an_empty_outline_has_the_answer_read_the_best_passages_read_unless_told_otherwise(search):
    def roles() -> Roles:
        return Roles(reasoner=[think("I need the birthplace of Marie Curie."), think("still nothing", False)],
                     entity=[plan(("Marie Curie", ["Marie Curie born"]))], summarizer=["None"])

    by_question = RecordingReranker()
    quiet = roles()
    ans = quiet.method(search, reranker=by_question, empty_outline_docs=1, knowledge_first=False).answer(QUESTION)
    final = ans.trace.steps[-1]
    assert final.name == "answer" and final.notes["outline"] == "None"
    assert by_question.queries[-1] == QUESTION.text and len(final.hits) == 1  # ranked by the question, best 1
    assert "the outline is empty" in final.notes["knowledge"]
    read = search.store.get(final.hits[0].doc_id)
    assert f"## Knowledge\n\n##### {read.title}\n\n{read.text}" in quiet.prompts("answer")[0]
    paper = roles()
    ans = paper.method(search, empty_outline="none", knowledge_first=False).answer(QUESTION)
    assert "knowledge" not in ans.trace.steps[-1].notes and "## Knowledge\n\nNone" in paper.prompts("answer")[0]


def test_the_answer_reads_the_outline_then_the_questions_own_hits_then_the_best_passages_read(search):
    def roles() -> Roles:
        return Roles(reasoner=[think("I need the birthplace of Marie Curie."), think("done", False)],
                     entity=[plan(("Warsaw", ["Warsaw river"]))], summarizer=["Marie Curie was born in Warsaw.", "None"])

    by_question, reads = RecordingReranker(), roles()
    ans = reads.method(search, reranker=by_question, question_query=True, question_docs=1, answer_docs=2,
                       k=3).answer(QUESTION)
    final, asked = ans.trace.steps[-1], search.retriever.search(QUESTION.text, 1)
    assert final.hits[0].doc_id == asked[0].doc_id and len(final.hits) == 2  # NativeRAG's first passage leads
    assert by_question.queries[-1] == QUESTION.text  # the rest: the passages read, ranked for the question
    assert {h.doc_id for h in final.hits} <= set(ans.trace.docs_read)
    prompt = reads.prompts("answer")[0]
    passages = "\n\n".join(f"##### {d.title}\n\n{d.text}" for d in map(search.store.get, (h.doc_id for h in final.hits)))
    assert f"## Knowledge\n\n#### Warsaw\n\nMarie Curie was born in Warsaw.\n\n{passages}\n\n## Question" in prompt
    assert "answer_docs" in final.notes["knowledge"] and "## Your reasoning" in prompt
    terse = roles()
    terse.method(search, answer_docs=0, answer_reasoning=False).answer(QUESTION)
    prompt = terse.prompts("answer")[0]
    assert "## Knowledge\n\n#### Warsaw\n\nMarie Curie was born in Warsaw.\n\n## Question" in prompt
    assert "reasoning" not in prompt and "birthplace" not in prompt  # neither the section nor the head names it


def test_the_answers_passages_are_read_ones_and_the_questions_own_hits_spare_the_reranker(search):
    """The question's hits beyond k were never read: the answer does not get them; where the question's read
    hits fill the answer's passages (the defaults' empty outline: NativeRAG's five), nothing is reranked."""
    def roles() -> Roles:
        return Roles(reasoner=[think("I need the birthplace of Marie Curie."), think("done", False)],
                     entity=[plan(("Marie Curie", ["Marie Curie born"]))], summarizer=["None", "None"])

    wide = roles()
    ans = wide.method(search, question_query=True, question_docs=4, k=1, empty_outline_docs=4,
                      knowledge_first=False).answer(QUESTION)
    final = ans.trace.steps[-1]
    assert final.hits and {h.doc_id for h in final.hits} <= set(ans.trace.docs_read)
    assert final.hits[0].doc_id == search.retriever.search(QUESTION.text, 1)[0].doc_id
    by_question = RecordingReranker()
    full = roles()
    ans = full.method(search, question_query=True, question_docs=2, k=3, empty_outline_docs=2, reranker=by_question,
                      knowledge_first=False).answer(QUESTION)
    assert [h.doc_id for h in ans.trace.steps[-1].hits] == [h.doc_id for h in search.retriever.search(QUESTION.text, 2)]
    assert by_question.queries == ["Marie Curie", QUESTION.text]  # the two entities' (else: its keyword), no more
