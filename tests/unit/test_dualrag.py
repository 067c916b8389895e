"""DualRAG driven by scripted fake LLMs (one per role): control flow, outline, fallbacks, ablations."""

from __future__ import annotations

import os
import threading
import time

import pytest
from dualrag_script import QUESTION, RecordingReranker, Roles, note, plan, think, two_hop_roles

from tandem.errors import LLMError
from tandem.methods.answers import ANSWER_MARKER, clean_answer
from tandem.methods.dualrag import Outline, union_by_id
from tandem.methods.dualrag import parse as R
from tandem.methods.dualrag import prompts as P
from tandem.testing.fake_llm import FakeLLM
from tandem.types import Hit, TraceObserver, current_observer, observe_traces


def test_two_hop_trajectory_builds_the_outline(search):
    roles = two_hop_roles()
    ans = roles.method(search).answer(QUESTION)
    assert ans.text == "Vistula"
    assert [s.name for s in ans.trace.steps] == ["iteration 1", "iteration 2", "iteration 3", "answer"]
    s1, s2, s3, final = ans.trace.steps
    assert s1.queries == ["Marie Curie born"] and s2.queries == ["Warsaw river", "river through Warsaw"]
    assert s1.notes["entities"] == {"Marie Curie": ["Marie Curie born"]}
    assert s1.notes["hits"]["Marie Curie"][0] == "d1" and len(s1.notes["hits"]["Marie Curie"]) <= 2
    assert s2.notes["hits"]["Warsaw"][0] == "d3"
    expected = ("#### Marie Curie\n\nMarie Curie was born in Warsaw.\n\n"
                "#### Warsaw\n\nWarsaw is the capital of Poland on the Vistula river.")
    assert s2.notes["outline"] == expected and final.notes["outline"] == expected
    assert s3.notes["need_retrieve"] is False and "entities" not in s3.notes  # no retrieval after "stop"
    # what each role saw
    assert roles.prompts("reasoner")[0].count("Known Knowledge:\nNone") == 1
    assert expected in roles.prompts("reasoner")[2]
    assert 'Known Entities: "Marie Curie"' in roles.prompts("entity_identifier")[1]
    assert "Entity: Warsaw" in roles.prompts("summarizer")[1] and "Keywords: Warsaw river, river through Warsaw" in roles.prompts("summarizer")[1]
    assert expected in roles.prompts("answer")[0] and "#### Step 2" in roles.prompts("answer")[0]
    # trace: calls per role, documents read
    assert [c.role for c in ans.trace.llm_calls] == [
        "reasoner", "entity_identifier", "summarizer", "reasoner", "entity_identifier", "summarizer", "reasoner", "answer"]
    assert "d1" in ans.trace.docs_read and "d3" in ans.trace.docs_read
    assert ans.to_dict()["trace"]["steps"][1]["notes"]["outline"] == expected  # JSON-ready


def test_rerank_query_is_the_entity_name_and_else_uses_its_keywords(search):
    roles = Roles(reasoner=[think("need"), think("done", False)],
                  entity=[plan(("Marie Curie", ["Curie birthplace", "Marie Curie born"]), ("else", ["capital river"]))],
                  summarizer=["Marie Curie was born in Warsaw.", "Warsaw is on the Vistula."])
    reranker = RecordingReranker()
    ans = roles.method(search, reranker=reranker).answer(QUESTION)
    assert reranker.queries == ["Marie Curie", "capital river"]
    assert all(h.source == "recording" for h in ans.trace.steps[0].hits)


def test_union_by_id_keeps_best_score_in_order():
    a = [Hit("x", 0.9, 1, "dense"), Hit("y", 0.5, 2, "dense")]
    b = [Hit("y", 0.95, 1, "dense"), Hit("z", 0.1, 2, "dense")]
    assert [(h.doc_id, h.score, h.rank) for h in union_by_id([a, b])] == [("y", 0.95, 1), ("x", 0.9, 2), ("z", 0.1, 3)]


def test_without_reranker_keeps_retrieval_order_top_k(search):
    roles = Roles(reasoner=[think("need"), think("done", False)], entity=[plan(("Warsaw", ["Warsaw", "Vistula river"]))],
                  summarizer=["Warsaw is on the Vistula."])
    ans = roles.method(search, reranker=None, k=3).answer(QUESTION)
    hits = ans.trace.steps[0].hits
    union = union_by_id(search.retriever.search_batch(["Warsaw", "Vistula river"], 50))
    assert [h.doc_id for h in hits] == [h.doc_id for h in union[:3]]


@pytest.mark.parametrize("bad", ["I think I need more.", "{\"thought\": ", "```json\n[1, 2]\n```"])
def test_malformed_reasoner_falls_back_to_raw_text(search, bad):
    roles = Roles(reasoner=[bad, "{}", think("done", False)], entity=[plan(("Warsaw", ["Warsaw"]))],
                  summarizer=["Warsaw is on the Vistula."])
    ans = roles.method(search).answer(QUESTION)
    s1 = ans.trace.steps[0]
    assert [c.role for c in s1.llm_calls[:2]] == ["reasoner", "reasoner:repair"]
    assert s1.notes["fallbacks"][0].startswith("reasoner") and s1.notes["need_retrieve"] is True
    assert s1.notes["thought"] == (bad.strip() or QUESTION.text)
    assert ans.text == "Vistula"


def test_reasoner_repair_round_and_lenient_flag(search):
    roles = Roles(reasoner=["not json", think("need"),  # repaired on the second try
                            '{"thought": "done", "need_retrieve": "false"}', "still not json"],  # coerced
                  entity=[plan(("Warsaw", ["Warsaw"]))], summarizer=["Warsaw is on the Vistula."])
    ans = roles.method(search).answer(QUESTION)
    s1, s2 = ans.trace.steps[:2]
    assert s1.notes["thought"] == "need" and "fallbacks" not in s1.notes
    assert s2.notes["thought"] == "done" and s2.notes["need_retrieve"] is False and "fallbacks" not in s2.notes
    assert "Reply again with only the JSON" in roles.llms["reasoner"].calls[1].last_user


def test_reasoner_fallback_on_the_last_step_stops(search):
    roles = Roles(reasoner=["garbage"] * 4, entity=[plan(("Warsaw", ["Warsaw"]))], summarizer=["Warsaw facts."])
    ans = roles.method(search, max_iter=2).answer(QUESTION)
    assert ans.trace.steps[0].notes["need_retrieve"] is True and ans.trace.steps[1].notes["need_retrieve"] is False
    assert len(roles.llms["entity_identifier"].calls) == 1


def test_malformed_entity_identifier_sends_the_thought_as_else_query(search):
    roles = Roles(reasoner=[think("Where was Marie Curie born"), think("done", False)],
                  entity=["entities: Marie Curie", "sorry"], summarizer=["Marie Curie was born in Warsaw."])
    ans = roles.method(search).answer(QUESTION)
    s1 = ans.trace.steps[0]
    assert s1.queries == ["Where was Marie Curie born"] and s1.notes["entities"] == {"else": ["Where was Marie Curie born"]}
    assert s1.notes["fallbacks"] == ["entity_identifier: the thought as one 'else' query"]
    assert "#### else" in s1.notes["outline"]


def test_entity_identifier_output_is_coerced(search):
    roles = Roles(reasoner=[think("need"), think("done", False)],
                  entity=['[{"entity": "Warsaw", "keywords": "Warsaw river"}, {"entity": "Warsaw", "keywords": ["Vistula"]}, {"x": 1}]', "sorry, no"],
                  summarizer=["Warsaw is on the Vistula."])
    ans = roles.method(search).answer(QUESTION)
    assert ans.trace.steps[0].notes["entities"] == {"Warsaw": ["Warsaw river", "Vistula"]}
    assert R.coerce_entities({"entities": [{"entity": "A", "keywords": []}]}) == [("A", ["A"])]
    assert R.coerce_entities({"entities": []}) is None and R.coerce_entities("x") is None


def test_step_cap(search):
    roles = Roles()
    roles.llms["reasoner"].default = think("still need more")
    roles.llms["entity_identifier"].default = plan(("Warsaw", ["Warsaw"]))
    roles.llms["summarizer"].default = note("Warsaw is on the Vistula.")
    ans = roles.method(search, stop_when_stuck=False).answer(QUESTION)  # default max_iter = 5
    assert [s.name for s in ans.trace.steps] == ["iteration 1", "iteration 2", "iteration 3", "iteration 4", "iteration 5", "answer"]
    assert len(roles.llms["reasoner"].calls) == 5 and len(roles.llms["answer"].calls) == 1
    # Warsaw's documents were read in step 1: later steps found nothing unread, so no more summaries
    assert len(roles.llms["summarizer"].calls) == 1


def test_a_stuck_loop_stops_once_the_thought_repeats_and_nothing_new_is_read(search):
    roles = Roles()
    roles.llms["reasoner"].default = think("still need more")
    roles.llms["entity_identifier"].default = plan(("Warsaw", ["Warsaw"]))
    roles.llms["summarizer"].default = note("Warsaw is on the Vistula.")
    ans = roles.method(search).answer(QUESTION)
    # step 1 reads Warsaw's documents; step 2 repeats the thought and reads nothing new: answer
    assert [s.name for s in ans.trace.steps] == ["iteration 1", "iteration 2", "answer"]
    assert "stuck" in ans.trace.steps[1].notes["stopped"] and "stopped" not in ans.trace.steps[0].notes
    # a new thought on a step that reads nothing keeps the loop going
    roles = Roles(reasoner=[think("need Warsaw"), think("need the river"), think("still the river"),
                            think("still the river"), think("done", False)])
    roles.llms["entity_identifier"].default = plan(("Warsaw", ["Warsaw"]))
    roles.llms["summarizer"].default = note("Warsaw is on the Vistula.")
    ans = roles.method(search).answer(QUESTION)
    assert [s.name for s in ans.trace.steps][-2:] == ["iteration 4", "answer"]


def test_a_first_step_that_answers_from_memory_is_overruled(search):
    roles = Roles(reasoner=[think("Marie Curie was born in Paris.", False), think("need Warsaw"),
                            think("The Vistula.", False)],
                  entity=[plan(("Marie Curie", ["Marie Curie birthplace"])), plan(("Warsaw", ["Warsaw"]))],
                  summarizer=["Marie Curie was born in Warsaw.", "Warsaw is on the Vistula."])
    ans = roles.method(search).answer(QUESTION)
    first = ans.trace.steps[0]
    assert first.notes["need_retrieve"] is False and "guess is dropped" in first.notes["overruled"]
    assert first.notes["entities"] == {"Marie Curie": ["Marie Curie birthplace"]}  # it retrieved
    # the guess is not in the history the later roles read
    assert all("born in Paris" not in p for p in roles.prompts("entity_identifier") + roles.prompts("answer"))
    # the authors' code: step 1 may answer from memory
    roles = Roles(reasoner=[think("Marie Curie was born in Paris.", False)])
    ans = roles.method(search, knowledge_first=False).answer(QUESTION)
    assert [s.name for s in ans.trace.steps] == ["iteration 1", "answer"]
    assert "born in Paris" in roles.prompts("answer")[0]


def test_entity_linking_appends_and_skips_read_documents(search):
    roles = Roles(reasoner=[think("need"), think("need more"), think("done", False)],
                  entity=[plan(("Marie Curie", ["Marie Curie"])), plan(("marie curie", ["Curie Nobel Prizes", "Paris"]))],
                  summarizer=["Marie Curie was born in Warsaw.", "She won two Nobel Prizes."])
    ans = roles.method(search, k=2).answer(QUESTION)
    s1, s2 = ans.trace.steps[:2]
    read_first = set(s1.notes["hits"]["Marie Curie"])
    assert s2.notes["entities"] == {"Marie Curie": ["Curie Nobel Prizes", "Paris"]}  # linked to the known name
    second_prompt = roles.prompts("summarizer")[1]
    for doc_id in read_first:
        assert search.store.get(doc_id).text not in second_prompt  # not summarised twice
    assert s2.notes["outline"] == "#### Marie Curie\n\nMarie Curie was born in Warsaw.\n\nShe won two Nobel Prizes."


def test_none_summary_rule_is_exact(search):
    assert R.is_none_summary("None") and R.is_none_summary(" none. ") and R.is_none_summary("**None**")
    assert R.is_none_summary("") and R.is_none_summary('"None."')
    assert not R.is_none_summary("Nonetheless, Warsaw lies on the Vistula.")
    assert not R.is_none_summary("None of the documents mention it, but Warsaw is in Poland.")
    roles = Roles(reasoner=[think("need"), think("done", False)],
                  entity=[plan(("Marie Curie", ["Marie Curie"]), ("Paris", ["Paris Seine"]))],
                  summarizer=["None.", "Nonetheless, Paris is the capital of France."])
    ans = roles.method(search).answer(QUESTION)
    s1 = ans.trace.steps[0]
    assert s1.notes["summaries"] == {"Marie Curie": None, "Paris": "Nonetheless, Paris is the capital of France."}
    assert s1.notes["outline"] == "#### Paris\n\nNonetheless, Paris is the capital of France."  # empty entity removed


def test_a_steps_summaries_go_at_once_where_the_llm_batches_with_the_trace_of_one_by_one(search):
    """Two entities with unread documents: on a batching LLM both Summarizer calls are in flight together (a
    barrier both must reach), each sees the question's observer, the first in the plan ends last, and the
    trace, notes and outline are those of the calls made one by one."""
    def run(batches: bool) -> tuple[list, dict, list, list]:
        barrier = threading.Barrier(2 if batches else 1, timeout=10)
        seen = []

        def meet(text: str, delay: float = 0.0):
            def reply(req):
                barrier.wait()
                seen.append(current_observer())
                time.sleep(delay)
                return text
            return reply

        roles = Roles(reasoner=[think("need"), think("done", False)],
                      entity=[plan(("Marie Curie", ["Marie Curie"]), ("Paris", ["Paris Seine"]))])
        roles.llms["summarizer"] = FakeLLM(batches=batches, rules=[
            ("Entity: Marie Curie", meet(note("Marie Curie was born in Warsaw."), delay=0.3)),  # ends after Paris's
            ("Entity: Paris", meet("not JSON at all")),  # a parse error, then the repair round
            ("could not be used", note("Paris is on the Seine.")),
        ])
        observer = TraceObserver(lambda i, step: None)
        with observe_traces(observer):
            ans = roles.method(search).answer(QUESTION)
        assert seen == [observer, observer]
        calls = [(c.role, c.output, c.parse_error, c.outcome) for c in ans.trace.llm_calls]
        return calls, ans.trace.steps[0].notes, ans.trace.docs_read, ans.trace.steps[0].queries

    at_once, one_by_one = run(True), run(False)
    assert at_once == one_by_one
    calls, notes, _read, _queries = at_once
    assert [c[0] for c in calls] == ["reasoner", "entity_identifier", "summarizer", "summarizer", "summarizer:repair",
                                     "reasoner", "answer"]
    assert notes["summaries"] == {"Marie Curie": "Marie Curie was born in Warsaw.", "Paris": "Paris is on the Seine."}
    assert notes["outline"] == "#### Marie Curie\n\nMarie Curie was born in Warsaw.\n\n#### Paris\n\nParis is on the Seine."
    assert len(notes["parse_errors"]) == 1 and notes["parse_errors"][0].startswith("summarizer:")


def test_a_failed_summary_among_those_at_once_fails_the_question_with_the_first_error_in_plan_order(search):
    def roles_failing(*failing: str) -> Roles:
        roles = Roles(reasoner=[think("need"), think("done", False)],
                      entity=[plan(("Marie Curie", ["Marie Curie"]), ("Paris", ["Paris Seine"]))])
        rules = [(f"Entity: {e}", LLMError(f"{e}: the server went away")) for e in failing]
        roles.llms["summarizer"] = FakeLLM(batches=True, rules=rules, default=note("x"))
        return roles

    with pytest.raises(LLMError, match="Paris: the server"):
        roles_failing("Paris").method(search).answer(QUESTION)
    with pytest.raises(LLMError, match="Marie Curie: the server"):
        roles_failing("Paris", "Marie Curie").method(search).answer(QUESTION)


def test_parallel_summaries_off_sends_them_one_by_one(search):
    roles = Roles(reasoner=[think("need"), think("done", False)],
                  entity=[plan(("Marie Curie", ["Marie Curie"]), ("Paris", ["Paris Seine"]))])
    active, most = [0], [0]
    lock = threading.Lock()

    def count(req):
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        time.sleep(0.2)
        with lock:
            active[0] -= 1
        return note("x")

    roles.llms["summarizer"] = FakeLLM(batches=True, default=count)
    roles.method(search, parallel_summaries=False).answer(QUESTION)
    assert most[0] == 1 and len(roles.llms["summarizer"].calls) == 2


def test_warm_requests_begin_as_each_roles_prompts_do_and_carry_its_schema(search):
    """What warm_up computes ahead is what every call of the role begins with: the role's instructions and
    demonstrations, to the role's LLM, under the schema its calls send."""
    roles = two_hop_roles()
    method = roles.method(search)
    warm = method.warm_requests()
    method.answer(QUESTION)
    assert len(warm) == 4 and {id(llm) for llm, _ in warm} == {id(llm) for llm in roles.llms.values()}
    heads = {"reasoner": P.REASONER_HEAD, "entity_identifier": P.ENTITY_HEAD, "summarizer": P.SUMMARIZER_HEAD,
             "answer": P.ANSWER_HEAD["short"]}
    for llm, req in warm:
        name = next(n for n, one in roles.llms.items() if one is llm)
        assert req.max_tokens == 1
        for real in llm.calls:
            shared = os.path.commonprefix([req.last_user, real.last_user])
            assert shared.startswith(heads[name]) and len(shared) > len(heads[name]), name
            assert req.json_schema == real.json_schema, name
    off = roles.method(search, use_reasoner=False, use_outline=False).warm_requests()
    assert [r.last_user.startswith(P.THOUGHT_HEAD) for _, r in off].count(True) == 1
    assert not any(r.last_user.startswith((P.REASONER_HEAD, P.SUMMARIZER_HEAD)) for _, r in off)


def test_an_answer_below_its_label_is_the_answer(search):
    """SmolLM2 often writes the label on a line of its own: "The answer is:", a blank line, the answer."""
    roles = Roles(reasoner=[think("done", False)], answer=["The answer is:\n\nWarsaw.\nMarie Curie was born there."])
    assert roles.method(search, knowledge_first=False).answer(QUESTION).text == "Warsaw"
    replies = {"Answer: Paris.": "Paris", "Paris\nmore": "Paris", "The answer is:": "", "": "",
               "So the answer is:\n\n 1901": "1901", ".\nParis": "",  # no label: the first line is the answer
               "Answer:\nCompleted Chain: (Marie Curie, born in, Warsaw)": "",  # a field of its own, not the answer
               "So the answer is:\n\nQuestion: Where was Y born?": ""}
    assert {reply: clean_answer(reply) for reply in replies} == replies


@pytest.mark.parametrize("forget", [False, True])
def test_an_entity_dropped_for_a_none_summary_does_not_read_its_documents_again_unless_told(search, forget):
    roles = Roles(reasoner=[think("need"), think("need more"), think("done", False)],
                  entity=[plan(("Marie Curie", ["Marie Curie"])), plan(("marie curie", ["Marie Curie"]))],
                  summarizer=["None", "Marie Curie was born in Warsaw."])
    ans = roles.method(search, k=2, forget_dropped=forget, knowledge_first=False).answer(QUESTION)
    s1, s2 = ans.trace.steps[:2]
    assert s1.notes["summaries"] == {"Marie Curie": None} and s1.notes["outline"] == "None"  # dropped
    if forget:  # the authors' code: the same documents go to the Summarizer a second time
        assert len(roles.prompts("summarizer")) == 2 and s2.notes["summaries"] == {"marie curie": "Marie Curie was born in Warsaw."}
        assert s2.notes["hits"]["marie curie"] == s1.notes["hits"]["Marie Curie"]
    else:  # read once: nothing unread, no Summarizer call, the entity stays out of the outline
        assert len(roles.prompts("summarizer")) == 1 and s2.notes["summaries"] == {}
        assert s2.notes["outline"] == "None"


def test_outline_keeps_earlier_content_when_a_later_summary_is_none():
    outline = Outline()
    assert outline.aggregate("Warsaw", "Warsaw is in Poland.", ["d3"])
    assert not outline.aggregate("Warsaw", "None", ["d4"])
    assert outline.snapshot() == {"Warsaw": ["Warsaw is in Poland."]} and outline.entries["Warsaw"].supports == ["d3", "d4"]
    assert outline.link("WARSAW") == "Warsaw" and outline.link("Paris") == "Paris"
    assert Outline().render() == "None"


def test_without_reasoner_uses_one_sentence_thoughts_until_the_marker(search):
    roles = Roles(entity=[plan(("Marie Curie", ["Marie Curie"])), plan(("Warsaw", ["Warsaw"]))],
                  summarizer=["Marie Curie was born in Warsaw.", "Warsaw is on the Vistula."])
    roles.llms["reasoner"].reset(["Marie Curie was born in Warsaw. Then more.", "Warsaw is on the Vistula.",
                                  f"{ANSWER_MARKER} the Vistula."])
    ans = roles.method(search, use_reasoner=False).answer(QUESTION)
    thoughts = [s.notes["thought"] for s in ans.trace.steps[:3]]
    assert thoughts == ["Marie Curie was born in Warsaw.", "Warsaw is on the Vistula.", f"{ANSWER_MARKER} the Vistula."]
    assert [s.notes["need_retrieve"] for s in ans.trace.steps[:3]] == [True, True, False]
    assert {c.role for c in ans.trace.llm_calls} == {"thought", "entity_identifier", "summarizer", "answer"}
    assert all(c.json_schema is None and c.stop == ("\n",) for c in roles.llms["reasoner"].calls)


def test_without_entity_identifier_the_thought_is_the_query(search):
    roles = Roles(reasoner=[think("Marie Curie birthplace"), think("done", False)], summarizer=["Marie Curie was born in Warsaw."])
    reranker = RecordingReranker()
    ans = roles.method(search, use_entity_identifier=False, reranker=reranker).answer(QUESTION)
    s1 = ans.trace.steps[0]
    assert roles.llms["entity_identifier"].calls == []
    assert s1.queries == ["Marie Curie birthplace"] and s1.notes["entities"] == {"else": ["Marie Curie birthplace"]}
    assert reranker.queries == ["Marie Curie birthplace"]


def test_without_outline_stores_raw_documents(search):
    roles = Roles(reasoner=[think("need"), think("need more"), think("done", False)],
                  entity=[plan(("Marie Curie", ["Marie Curie"])), plan(("Warsaw", ["Warsaw", "Marie Curie"]))])
    ans = roles.method(search, use_outline=False).answer(QUESTION)
    assert roles.llms["summarizer"].calls == []
    outline = ans.trace.steps[1].notes["outline"]
    assert outline.startswith(f"#### {P.RAW_DOCS_ENTITY}\n\n##### Marie Curie\n\nMarie Curie was born in Warsaw")
    assert outline.count("##### Marie Curie") == 1  # a document is stored once
    assert "##### Warsaw" in outline and outline in roles.prompts("reasoner")[2]
