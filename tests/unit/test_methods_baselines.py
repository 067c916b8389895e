"""Direct, NativeRAG, Oracle and IRCoT driven by the scripted fake LLM: control flow and traces."""

from __future__ import annotations

import math

import pytest
from tests.conftest import shared

from tandem.compose import build_method
from tandem.corpus.loaders import load_dataset
from tandem.errors import ConfigError
from tandem.llm.base import LLMResponse
from tandem.methods.answers import (
    ANSWER_MARKER,
    BRIEF_INSTRUCTION,
    CHOICE_INSTRUCTION,
    FIRST_TOKENS,
    YES_NO_INSTRUCTION,
    asks_yes_or_no,
    extract_answer,
    first_sentence,
    reasoned_answer,
    yes_no_margin,
)
from tandem.testing.fake_llm import FakeLLM
from tandem.types import Question

QUESTION = Question("q1", "Which river flows through the city where Marie Curie was born?", ("Vistula",), ("d1", "d3"))


def test_direct_makes_one_call_without_retrieval():
    llm = FakeLLM(responses=["Answer: Vistula."])
    ans = build_method("direct", llm).answer(QUESTION)
    assert ans.text == "Vistula"
    assert [s.name for s in ans.trace.steps] == ["answer"]
    assert ans.trace.docs_read == [] and len(ans.trace.llm_calls) == 1
    assert "Vistula" not in llm.calls[0].prompt_text  # no documents in a closed-book prompt


def test_naive_rag_reads_top_k(search):
    llm = FakeLLM(responses=["Vistula"])
    ans = build_method("naive_rag", llm, search, k=2).answer(QUESTION)
    retrieve = ans.trace.steps[0]
    assert retrieve.queries == [QUESTION.text] and len(retrieve.hits) == 2
    assert ans.trace.docs_read == [h.doc_id for h in retrieve.hits]
    prompt = llm.calls[0].last_user
    assert "[1]" in prompt and "[2]" in prompt and "[3]" not in prompt
    assert ans.text == "Vistula"


def test_naive_rag_can_put_the_best_document_next_to_the_question(search, small_docs):
    titles = {d.id: d.title for d in small_docs}
    shown = {}
    for order in ("best_first", "best_last"):
        llm = FakeLLM(responses=["Vistula"])
        ans = build_method("naive_rag", llm, search, k=3, doc_order=order).answer(QUESTION)
        ranked = [h.doc_id for h in ans.trace.steps[0].hits]
        assert ans.trace.docs_read == ranked  # the trace keeps the ranking either way
        prompt = llm.calls[0].last_user
        shown[order] = sorted(ranked, key=lambda d: prompt.index(f"] {titles[d]}: "))
    assert shown["best_first"] == ranked and shown["best_last"] == ranked[::-1]


def test_naive_rag_can_state_the_question_before_the_documents_too(search):
    for first in (False, True):
        llm = FakeLLM(responses=["Vistula"])
        build_method("naive_rag", llm, search, k=2, question_first=first).answer(QUESTION)
        prompt = llm.calls[0].last_user
        asked = [i for i in range(len(prompt)) if prompt.startswith(f"Question: {QUESTION.text}", i)]
        assert len(asked) == (2 if first else 1) and asked[-1] > prompt.index("[2]")
        assert (asked[0] < prompt.index("[1]")) is first


def test_reason_choices_asks_a_choice_for_facts_first_and_reads_the_answer_after_the_marker(search):
    choice = Question("q3", "Who was born first, Emma Bull or Virginia Woolf?", ("Virginia Woolf",))
    reply = f"Emma Bull was born in 1954.\nVirginia Woolf was born in 1882.\n{ANSWER_MARKER} Virginia Woolf."
    for style, question, reasoned in (("instruction_yes_no", choice, True), ("instruction", choice, True),
                                      ("system", choice, False), ("instruction_yes_no", QUESTION, False)):
        llm = FakeLLM(responses=[reply if reasoned else "Vistula"])
        llm.answer_style = style
        ans = build_method("naive_rag", llm, search, k=2, reason_choices=True).answer(question)
        req = llm.calls[0]
        assert req.last_user.endswith(CHOICE_INSTRUCTION) is reasoned
        assert (req.max_tokens >= 128) is reasoned  # room for the facts before the answer
        assert ans.text == ("Virginia Woolf" if reasoned else "Vistula")
    llm = FakeLLM(responses=["Vistula"])  # off by default: the few-words prompt
    build_method("naive_rag", llm, search, k=2).answer(choice)
    assert llm.calls[0].last_user.endswith(f"{BRIEF_INSTRUCTION}\nAnswer:")
    # a reply cut before its marker: its last line
    assert reasoned_answer("Emma Bull was born in 1954.\nVirginia Woolf") == "Virginia Woolf"


def test_the_yes_no_style_asks_a_yes_no_question_for_a_verdict_and_every_other_as_before(search):
    verdict = Question("q2", "Were Scott Derrickson and Ed Wood of the same nationality?", ("yes",))
    for style, question, instruction in (("instruction_yes_no", verdict, YES_NO_INSTRUCTION),
                                         ("instruction_yes_no", QUESTION, BRIEF_INSTRUCTION),
                                         ("instruction", verdict, BRIEF_INSTRUCTION)):
        llm = FakeLLM(responses=["yes"])
        llm.answer_style = style
        build_method("naive_rag", llm, search, k=2).answer(question)
        prompt = llm.calls[0].last_user
        assert prompt.endswith(f"Question: {question.text}\n{instruction}\nAnswer:"), (style, prompt)


def _first_tokens_reply(*pairs: tuple[str, float]) -> LLMResponse:
    return LLMResponse(text=pairs[0][0], prompt_tokens=9, completion_tokens=1, latency_s=0.0, finish_reason="length",
                       model="fake", first_tokens=pairs)


def test_yes_no_threshold_answers_a_yes_no_question_by_its_first_token_margin(search):
    verdict = Question("q2", "Were Scott Derrickson and Ed Wood of the same nationality?", ("yes",))
    likely_yes = _first_tokens_reply(("Yes", -0.4), ("yes", -1.6), ("No", -2.6), ("no", -3.6))
    margin = math.log(math.exp(-0.4) + math.exp(-1.6)) - math.log(math.exp(-2.6) + math.exp(-3.6))
    for threshold, expected in ((margin - 0.01, "yes"), (margin + 0.01, "no")):
        llm = FakeLLM(responses=[likely_yes], tells_first_tokens=True)
        llm.answer_style = "instruction_yes_no"
        ans = build_method("naive_rag", llm, search, k=2, yes_no_threshold=threshold).answer(verdict)
        assert ans.text == expected  # "Yes" is the likeliest token either way: the margin decides
        req, step = llm.calls[0], ans.trace.steps[-1]
        assert len(llm.calls) == 1 and req.first_tokens == FIRST_TOKENS and req.max_tokens == 1
        assert req.last_user.endswith(f"{YES_NO_INSTRUCTION}\nAnswer:")  # the style's own prompt
        assert step.notes["yes_no_margin"] == pytest.approx(margin, abs=1e-3)
        assert [c.outcome for c in step.llm_calls] == ["parsed"]
    llm = FakeLLM(responses=["Vistula"], tells_first_tokens=True)  # a question that asks no yes or no: a reply
    ans = build_method("naive_rag", llm, search, k=2, yes_no_threshold=1.0).answer(QUESTION)
    assert ans.text == "Vistula" and llm.calls[0].first_tokens == 0


def test_yes_no_threshold_falls_back_to_the_reply_and_counts_it(search):
    verdict = Question("q2", "Were Scott Derrickson and Ed Wood of the same nationality?", ("yes",))
    llm = FakeLLM(responses=[_first_tokens_reply(("Both", -0.2), ("The", -2.0)), "yes"], tells_first_tokens=True)
    ans = build_method("naive_rag", llm, search, k=2, yes_no_threshold=1.0).answer(verdict)
    step = ans.trace.steps[-1]
    assert ans.text == "yes" and [c.outcome for c in step.llm_calls][-1] == "fallback"
    assert "neither yes nor no" in step.notes["fallbacks"][0] and "yes_no_margin" not in step.notes
    llm = FakeLLM(responses=["yes"])  # an LLM that cannot tell them: the reply, counted the same way
    ans = build_method("naive_rag", llm, search, k=2, yes_no_threshold=1.0).answer(verdict)
    step = ans.trace.steps[-1]
    assert ans.text == "yes" and llm.calls[0].first_tokens == 0 and step.llm_calls[-1].outcome == "fallback"
    assert "does not tell its first tokens' probabilities" in step.notes["fallbacks"][0]


def test_the_models_own_yes_no_threshold_is_the_default_and_off_asks_for_the_reply(search):
    verdict = Question("q2", "Were Scott Derrickson and Ed Wood of the same nationality?", ("yes",))
    likely_yes = _first_tokens_reply(("Yes", -0.1), ("No", -2.4))  # margin 2.3
    for own, setting, expected in ((3.0, "model", "no"), (1.0, "model", "yes"), (3.0, 2.0, "yes"),
                                   (3.0, "off", "Yes"), (None, "model", "Yes")):
        llm = FakeLLM(responses=[likely_yes, "Yes"], tells_first_tokens=True)
        llm.yes_no_threshold = own  # the local backend sets it from the model's ladder entry
        ans = build_method("naive_rag", llm, search, k=2, yes_no_threshold=setting).answer(verdict)
        assert ans.text == expected, (own, setting)
        assert (llm.calls[0].first_tokens == FIRST_TOKENS) is (expected != "Yes")
    with pytest.raises(ConfigError, match="yes_no_threshold"):
        build_method("naive_rag", FakeLLM(), search, k=2, yes_no_threshold="sometimes")


def test_the_yes_no_margin_sums_each_sides_forms():
    assert yes_no_margin([("Yes", math.log(0.5)), (" yes", math.log(0.1)), ("No", math.log(0.2))]) == \
        pytest.approx(math.log(0.6 / 0.2))
    assert yes_no_margin([("No", -0.1), ("Maybe", -3.0)]) == -math.inf
    assert yes_no_margin([("Both", -0.1)]) is None and yes_no_margin([]) is None


def test_yes_no_questions_are_told_by_their_words_on_hotpotqa():
    questions = load_dataset(shared("hotpotqa/dev500.jsonl")).questions
    asked = [asks_yes_or_no(q.text) for q in questions]
    gold = [q.answers[0].lower() in ("yes", "no") for q in questions]
    assert sum(gold) == 80 and sum(a and g for a, g in zip(asked, gold, strict=True)) == 79  # "Both Sorbaria and ... ?" missed
    assert not any(a and not g for a, g in zip(asked, gold, strict=True))  # "Is X or Y older?" asks which
    assert not asks_yes_or_no("Is Gasherbrum II or Nuptse closer to Everest?") and asks_yes_or_no("Did it rain?")


def test_oracle_reads_gold_only(search):
    llm = FakeLLM(responses=["Vistula"])
    ans = build_method("oracle", llm, store=search.store, mode="paragraph").answer(QUESTION)
    prompt = llm.calls[0].last_user
    assert "born in Warsaw" in prompt and "capital of Poland" in prompt and "Seine" not in prompt
    assert ans.trace.docs_read == ["d1", "d3"]


def test_oracle_sentence_mode_uses_supporting_sentences(search):
    q = Question("q", "Where?", ("x",), ("d1",), {"supporting_sentences": ["Only this sentence."]})
    llm = FakeLLM(responses=["x"])
    build_method("oracle", llm, store=search.store).answer(q)
    assert "Only this sentence." in llm.calls[0].last_user and "Nobel" not in llm.calls[0].last_user


def test_ircot_stops_on_answer_marker(search):
    llm = FakeLLM(responses=[
        "Marie Curie was born in Warsaw. She later moved.",
        "Warsaw lies on the Vistula river.",
        f"{ANSWER_MARKER} the Vistula.",
    ])
    ans = build_method("ircot", llm, search, k=2).answer(QUESTION)
    assert ans.text == "the Vistula"
    names = [s.name for s in ans.trace.steps]
    assert names == ["retrieve", "reason 1", "reason 2", "reason 3"]
    # each thought (first sentence only) became the next query
    assert ans.trace.steps[1].notes["thought"] == "Marie Curie was born in Warsaw."
    assert ans.trace.steps[1].queries == ["Marie Curie was born in Warsaw."]
    assert ans.trace.steps[2].queries == ["Warsaw lies on the Vistula river."]
    assert ans.trace.steps[3].notes["stop"] == "answer marker" and ans.trace.steps[3].queries == []
    assert all(call.messages[-1]["content"].endswith("\n") for call in ans.trace.llm_calls)
    assert len(llm.calls) == 3


def test_ircot_respects_step_cap_then_answers(search):
    llm = FakeLLM(responses=["Thinking about Curie."] * 3 + ["Warsaw"])
    ans = build_method("ircot", llm, search, k=2, max_steps=3).answer(QUESTION)
    assert [s.name for s in ans.trace.steps] == ["retrieve", "reason 1", "reason 2", "reason 3", "answer"]
    assert ans.trace.steps[3].queries == []  # no retrieval after the last allowed step
    assert ans.text == "Warsaw" and len(llm.calls) == 4


def test_ircot_document_policies(search):
    script = ["Paris is the capital of France.", f"{ANSWER_MARKER} no idea"]
    replace = build_method("ircot", FakeLLM(responses=script), search, k=1, policy="replace").answer(QUESTION)
    accumulate = build_method("ircot", FakeLLM(responses=script), search, k=1, policy="accumulate").answer(QUESTION)
    first = replace.trace.steps[0].hits[0].doc_id
    second = replace.trace.steps[1].hits[0].doc_id
    assert second == "d5" and first != second
    # the prompt of the second reasoning call shows one doc under replace, both under accumulate
    replace_prompt = replace.trace.llm_calls[1].messages[-1]["content"].split("Now the real task.")[1]
    accumulate_prompt = accumulate.trace.llm_calls[1].messages[-1]["content"].split("Now the real task.")[1]
    assert "[2]" not in replace_prompt and "Seine" in replace_prompt
    assert "[2]" in accumulate_prompt and "Seine" in accumulate_prompt
    assert accumulate.trace.docs_read == [first, "d5"]


def test_ircot_helpers():
    assert first_sentence("Dr. Smith was born in 1950. Then more.") == "Dr. Smith was born in 1950."
    assert first_sentence("So the answer is: St. Louis. Extra") == "So the answer is: St. Louis. Extra"
    assert extract_answer("so the answer is: Warsaw.") == "Warsaw"
    assert extract_answer("No marker here.") is None
    assert extract_answer("The answer is: Paris") == "Paris"


def test_unknown_method_and_settings(search):
    with pytest.raises(ConfigError, match=r"unknown method 'nope'; choose one of \[.*'direct'"):
        build_method("nope", FakeLLM())
    with pytest.raises(ConfigError, match="give it an index"):
        build_method("ircot", FakeLLM())
    with pytest.raises(ConfigError, match="policy"):
        build_method("ircot", FakeLLM(), search, policy="sometimes")
    with pytest.raises(ConfigError, match=r"direct settings: unknown setting 'top_p'; valid settings: \['max_tokens', 'temperature'\]"):
        build_method("direct", FakeLLM(), top_p=3)
