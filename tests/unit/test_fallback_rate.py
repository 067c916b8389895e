"""Every fallback a method takes moves the run's ``fallback_rate`` (per role), and a reply read only by a
lenient rule counts as ``repaired``, not ``parsed``: one test per method's fallback."""

from __future__ import annotations

import json

from tests.unit.test_baselines_more import _gen, _metarag, _plan, _pseudo
from tests.unit.test_cooprag import COMPLETED, UNROLL
from tests.unit.test_dualrag import Roles, plan

from tandem.compose import build_method
from tandem.eval.runner import protocol_health
from tandem.methods.answers import ANSWER_MARKER
from tandem.methods.cooprag import CoopRAG
from tandem.methods.cooprag.settings import CoopRAGSettings
from tandem.testing.fake_llm import FakeLLM
from tandem.types import Answer, Question

QUESTION = Question("q1", "Which river flows through the city where Marie Curie was born?", ("Vistula",), ("d1", "d3"))


def health(ans: Answer) -> dict:
    return protocol_health([ans.trace.protocol()])


def rate(ans: Answer, role: str) -> tuple[int, int, int, int]:
    row = health(ans)["protocol"][role]
    return row["calls"], row["parsed_first"], row["repaired"], row["fell_back"]


def test_ircot_missing_marker_is_a_fallback_and_the_lenient_marker_a_repair(search):
    ans = build_method("ircot", FakeLLM(["Thinking about Curie."] * 2 + ["Warsaw"]), search, max_steps=2).answer(QUESTION)
    assert rate(ans, "reason") == (1, 0, 0, 1) and health(ans)["fallback_rate"] == 1.0
    assert ans.trace.steps[-2].notes["fallbacks"] == ["reason: no answer marker: one brief answer call"]
    exact = build_method("ircot", FakeLLM([f"{ANSWER_MARKER} Vistula"]), search).answer(QUESTION)
    assert rate(exact, "reason") == (1, 1, 0, 0) and health(exact)["fallback_rate"] == 0.0
    lenient = build_method("ircot", FakeLLM(["The answer is: Vistula"]), search).answer(QUESTION)
    assert rate(lenient, "reason") == (1, 0, 1, 0) and lenient.text == "Vistula"


def test_iter_retgen_missing_marker_is_a_fallback(search):
    ans = build_method("iter_retgen", FakeLLM(["Marie Curie was born in Warsaw.", "Vistula"]), search,
                       iterations=1).answer(QUESTION)
    assert rate(ans, "generate") == (1, 0, 0, 1) and ans.text == "Vistula"
    ok = build_method("iter_retgen", FakeLLM([f"Warsaw. {ANSWER_MARKER} Vistula"]), search, iterations=1).answer(QUESTION)
    assert rate(ok, "generate") == (1, 1, 0, 0) and health(ok)["fallback_rate"] == 0.0


def test_cooprag_empty_answer_is_a_counted_fallback(search):
    empty = CoopRAG(FakeLLM([UNROLL, COMPLETED, "Answer:"]), search, None, CoopRAGSettings(k=2)).answer(QUESTION)
    assert empty.text == "Warsaw" and rate(empty, "answer") == (1, 0, 0, 1)
    full = CoopRAG(FakeLLM([UNROLL, COMPLETED, "Vistula"]), search, None, CoopRAGSettings(k=2)).answer(QUESTION)
    assert rate(full, "answer") == (1, 1, 0, 0)
    assert health(empty)["fallback_rate"] > health(full)["fallback_rate"]


def test_metarag_empty_rewrite_is_a_counted_fallback(search):
    script = [_gen("Paris"), _pseudo("Warsaw"), '"no"', '"no"', "", _gen("Vistula"), _pseudo("Vistula")]
    ans = _metarag(FakeLLM(script), search).answer(QUESTION)
    assert ans.trace.steps[1].queries == [QUESTION.text[:64]] and rate(ans, "rewrite") == (1, 0, 0, 1)
    script[4] = "Vistula river Warsaw"
    ok = _metarag(FakeLLM(script), search).answer(QUESTION)
    assert rate(ok, "rewrite") == (1, 1, 0, 0) and health(ans)["fallback_rate"] > health(ok)["fallback_rate"]


def test_genground_tags_without_ref_is_a_counted_fallback(search):
    llm = FakeLLM([_plan("Where was Marie Curie born?", "Warsaw"), "no tags at all",
                   "<ref>Marie Curie was born in Warsaw.</ref><revise>Warsaw</revise>", _plan(finished=True), "Vistula"])
    ans = build_method("genground", llm, search, reranker="none", k=2, batch=1,
                       ground_format="tags").answer(QUESTION)
    assert rate(ans, "ground") == (2, 1, 0, 1)
    assert ans.trace.steps[0].notes["fallbacks"] == ["ground: no <ref> tag; batch taken as empty"]


def test_dualrag_without_reasoner_empty_thought_is_a_counted_fallback(search):
    roles = Roles(entity=[plan(("Marie Curie", ["Marie Curie"]))], summarizer=["Marie Curie was born in Warsaw."])
    roles.llms["reasoner"].reset(["", f"{ANSWER_MARKER} the Vistula."])
    ans = roles.method(search, use_reasoner=False).answer(QUESTION)
    assert ans.trace.steps[0].notes["thought"] == QUESTION.text
    assert rate(ans, "thought") == (2, 1, 0, 1)


def test_lenient_json_counts_as_repaired_not_parsed(search):
    """A Reasoner reply that needed coercion (a string flag, prose around the JSON) is ``repaired``."""
    strict = json.dumps({"thought": "Marie Curie was born in Warsaw.", "need_retrieve": False})
    lenient = 'Sure: {"thought": "Marie Curie was born in Warsaw.", "need_retrieve": "no"}'
    for reply, expected in ((strict, (1, 1, 0, 0)), (lenient, (1, 0, 1, 0))):
        roles = Roles(reasoner=[reply], summarizer=[])
        ans = roles.method(search, knowledge_first=False).answer(QUESTION)
        assert rate(ans, "reasoner") == expected, reply
