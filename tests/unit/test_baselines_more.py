"""Iter-RetGen, GenGround and MetaRAG driven by the scripted fake LLM: control flow and traces."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pytest

from tandem.compose import build_method
from tandem.errors import ConfigError
from tandem.methods import Search
from tandem.methods.answers import ANSWER_MARKER
from tandem.methods.genground.algorithm import ASK, GROUND, PLAN, parse_ground, parse_ground_json, parse_plan
from tandem.methods.metarag.algorithm import (
    GENERATE,
    PSEUDO,
    SUGGEST_KNOWLEDGE,
    SUGGEST_REASON,
    SUGGEST_RETRIEVED,
    MetaRAG,
    parse_yes_no,
)
from tandem.methods.metarag.settings import MetaRAGSettings
from tandem.registry import METHODS
from tandem.testing.fake_llm import FakeLLM
from tandem.types import Question

QUESTION = Question("q1", "Which river flows through the city where Marie Curie was born?", ("Vistula",), ("d1", "d3"))


class ExactEncoder:
    """Unit vectors equal for equal (case-folded) texts and orthogonal otherwise: cosine is 1 or 0."""

    name, dim, pooling = "exact", 32, "mean"

    def __init__(self) -> None:
        self.slots: dict[str, int] = {}

    def encode(self, texts: Sequence[str], **_: object) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row, self.slots.setdefault(text.lower(), len(self.slots))] = 1.0
        return out


def _plan(sub_question: str = "", answer: str = "", finished: bool = False) -> str:
    return json.dumps({"finished": finished, "sub_question": sub_question, "answer": answer})


def _gen(answer: str, reason: str = "Marie Curie was born in Warsaw.") -> str:
    return json.dumps({"reason": reason, "answer": answer})


def _ground(evidence: str, answer: str = "") -> str:
    return json.dumps({"evidence": evidence, "answer": answer})


def _pseudo(answer: str) -> str:
    return json.dumps({"answer": answer})


def test_registered_and_need_an_index(search):
    for name in ("iter_retgen", "genground", "metarag"):
        assert name in METHODS and "index" in METHODS.get(name).needs
        with pytest.raises(ConfigError, match="give it an index"):
            build_method(name, FakeLLM())
    # MetaRAG's monitor encoder loads on first use, not at build time
    assert isinstance(build_method("metarag", FakeLLM(), search, reranker="none"), MetaRAG)


def test_iter_retgen_queries_carry_the_previous_generation(search):
    gens = ["Marie Curie was born in Warsaw.", f"Warsaw lies on the Vistula. {ANSWER_MARKER} Vistula.",
            f"Warsaw is on the Vistula. {ANSWER_MARKER} the Vistula."]
    llm = FakeLLM(responses=gens)
    ans = build_method("iter_retgen", llm, search, k=2).answer(QUESTION)
    steps = ans.trace.steps
    assert [s.name for s in steps] == ["iteration 1", "iteration 2", "iteration 3"]
    assert steps[0].queries == [QUESTION.text]
    assert steps[1].queries == [f"{QUESTION.text} {gens[0]}"] and steps[2].queries == [f"{QUESTION.text} {gens[1]}"]
    assert all(len(s.hits) == 2 and len(s.llm_calls) == 1 for s in steps)
    assert ans.text == "the Vistula" and len(llm.calls) == 3
    # each generation reads its own retrieval
    assert f"[1] {search.store.get(steps[2].hits[0].doc_id).title}" in llm.calls[2].last_user


def test_iter_retgen_without_marker_asks_for_a_brief_answer(search):
    llm = FakeLLM(responses=["Marie Curie was born in Warsaw.", "Vistula"])
    ans = build_method("iter_retgen", llm, search, k=2, iterations=1).answer(QUESTION)
    assert [s.name for s in ans.trace.steps] == ["iteration 1", "answer"]
    assert "Marie Curie was born in Warsaw." in llm.calls[1].last_user and ans.text == "Vistula"


def test_genground_stops_grounding_at_the_first_non_empty_batch(search):
    llm = FakeLLM(responses=[
        _plan("Was Marie Curie born in Warsaw or Paris?", "Paris"),
        "<ref> Empty </ref>",
        "<ref>Marie Curie was born in Warsaw.</ref><revise>Warsaw</revise>",
        _plan(finished=True),
        "Vistula",
    ])
    ans = build_method("genground", llm, search, reranker="none", k=4, batch=1,
                       ground_format="tags").answer(QUESTION)
    first, second, final = ans.trace.steps
    assert [s.name for s in ans.trace.steps] == ["iteration 1", "iteration 2", "answer"]
    assert first.queries == ["Was Marie Curie born in Warsaw or Paris?"] and len(first.hits) >= 3
    assert [c.role for c in first.llm_calls] == ["plan", "ground", "ground"]  # later batches are not asked
    assert first.notes["grounded_batch"] == 2 and first.notes["answer"] == "Warsaw"
    assert ans.trace.docs_read == [h.doc_id for h in first.hits[:2]]
    assert second.notes["stop"] == "finished" and second.queries == []
    pair = "Was Marie Curie born in Warsaw or Paris? -> Warsaw"  # the revised answer replaces "Paris"
    assert pair in llm.calls[3].last_user and pair in llm.calls[4].last_user
    assert ans.text == "Vistula" and final.llm_calls[0].role == "answer"


def test_genground_keeps_the_generated_answer_without_evidence_and_respects_the_cap(search):
    llm = FakeLLM(responses=[_plan("Where was Marie Curie born?", "Warsaw"), "no tags at all", "<ref>Empty</ref>",
                             _plan("Which river flows through Warsaw?", "Vistula"), "<ref> Empty </ref>",
                             "<ref> Empty </ref>", "Vistula"])
    ans = build_method("genground", llm, search, reranker="none", k=2, batch=1, max_iter=2,
                       ground_format="tags").answer(QUESTION)
    first, second, _ = ans.trace.steps
    assert first.notes["answer"] == "Warsaw" and first.notes["grounded_batch"] is None
    assert first.notes["fallbacks"] == ["ground: no <ref> tag; batch taken as empty"]
    assert second.notes["answer"] == "Vistula" and len(second.llm_calls) == 3  # plan + 2 batches
    assert ans.text == "Vistula" and llm.remaining == 0


def test_genground_unusable_plan_is_a_counted_fallback(search):
    llm = FakeLLM(responses=["not json", "still not json", "Vistula"])
    ans = build_method("genground", llm, search, reranker="none").answer(QUESTION)
    first = ans.trace.steps[0]
    assert first.notes["stop"] == "no usable plan"
    assert first.notes["fallbacks"] == ["plan: stop generating sub-questions"]
    assert [c.role for c in first.llm_calls] == ["plan", "plan:repair"] and first.llm_calls[-1].outcome == "fallback"
    assert ans.text == "Vistula"


def _metarag(llm: FakeLLM, search: Search, **settings: object) -> MetaRAG:
    s = MetaRAGSettings.from_dict({"k": 2, "reranker": "none", **settings})
    return MetaRAG(llm, search, s, encoder=ExactEncoder)


def test_metarag_accepts_when_the_monitor_agrees(search):
    llm = FakeLLM(responses=[_gen("Warsaw"), _pseudo("Warsaw.")])
    ans = _metarag(llm, search).answer(QUESTION)
    it = ans.trace.steps[1]
    assert [c.role for c in it.llm_calls] == ["generate", "monitor"]
    assert it.notes["stop"] == "accepted" and it.notes["similarity"] == 1.0
    assert ans.text == "Warsaw" and len(ans.trace.steps) == 2


def test_metarag_critic_rewrites_the_query_when_references_are_insufficient(search):
    long_query = "Vistula river of Poland through its capital city, with every detail spelled out at length"
    llm = FakeLLM(responses=[_gen("Paris"), _pseudo("Warsaw"), '"no"', '"no"', long_query, _gen("Vistula"),
                             _pseudo("Vistula")])
    ans = _metarag(llm, search).answer(QUESTION)
    first, second = ans.trace.steps[1:]
    assert [c.role for c in first.llm_calls] == ["generate", "monitor", "internal_knowledge", "sufficiency",
                                                 "rewrite"]
    assert first.queries == [long_query[:64]] and first.notes["sufficient"] is False
    assert "entailed" not in first.notes
    union = ans.trace.steps[0].hits + first.hits
    assert len({h.doc_id for h in union}) == len(ans.trace.docs_read) > 2
    assert f"Suggestion: {SUGGEST_RETRIEVED}" in llm.calls[5].last_user and "[3]" in llm.calls[5].last_user
    assert second.notes["stop"] == "accepted" and ans.text == "Vistula"


def test_metarag_critic_checks_entailment_when_references_suffice(search):
    llm = FakeLLM(responses=[_gen("Paris"), _pseudo("Warsaw"), "yes", "Yes.", "no", _gen("Warsaw")])
    ans = _metarag(llm, search, max_iter=2).answer(QUESTION)
    first, second = ans.trace.steps[1:]
    assert [c.role for c in first.llm_calls] == ["generate", "monitor", "internal_knowledge", "sufficiency",
                                                 "entailment"]
    assert first.queries == [] and first.notes["entailed"] is False
    assert first.notes["suggestion"] == f"{SUGGEST_REASON} {SUGGEST_KNOWLEDGE}"
    assert [c.role for c in second.llm_calls] == ["generate"] and second.notes["stop"] == "iteration cap"
    assert ans.text == "Warsaw" and llm.remaining == 0


def test_metarag_unusable_replies_fall_back_visibly(search):
    llm = FakeLLM(responses=["Warsaw, I think", "still prose", "Warsaw"])
    ans = _metarag(llm, search, monitor="off").answer(QUESTION)
    it = ans.trace.steps[1]
    assert it.notes["fallbacks"] == ["generate: the reply's first line is the answer"]
    assert ans.text == "Warsaw, I think" and it.notes["stop"] == "monitor off" and llm.remaining == 1


def test_parsers():
    assert parse_ground("<ref> Empty </ref>") == ("", "")
    assert parse_ground("<ref>Warsaw is on the Vistula.</ref><revise>Vistula.</revise>") == (
        "Warsaw is on the Vistula.", "Vistula")
    assert parse_ground("nothing") is None
    assert parse_plan(_plan(finished=True)).finished
    assert parse_yes_no('"Yes."') is True and parse_yes_no("no, because") is False
    for bad in (_plan(), "prose"):
        with pytest.raises(Exception, match="sub_question|JSON"):
            parse_plan(bad)
    with pytest.raises(Exception, match="yes or no"):
        parse_yes_no("maybe")


def test_genground_must_ask_a_sub_question_before_it_may_finish(search):
    llm = FakeLLM(responses=[_plan(finished=True), _plan("Where was Marie Curie born?", "Warsaw"),
                             _ground("Marie Curie was born in Warsaw.", "Warsaw"),
                             _plan(finished=True), "Vistula"])
    ans = build_method("genground", llm, search, reranker="none", k=1, batch=1).answer(QUESTION)
    first, second, _ = ans.trace.steps
    # the first plan is asked under ASK_SCHEMA: finished can only be false, the sub-question non-empty
    schema = llm.calls[0].json_schema
    assert schema == ASK.bounded and schema["properties"]["finished"]["enum"] == [False]
    assert "finished\": true" not in llm.calls[0].messages[0].content
    assert [c.role for c in first.llm_calls] == ["plan", "plan:repair", "ground"]  # finishing at once is refused
    assert first.queries == ["Where was Marie Curie born?"] and first.notes["may_finish"] is False
    assert llm.calls[3].json_schema == PLAN.bounded and second.notes == {"may_finish": True, "stop": "finished"}
    assert ans.text == "Vistula" and llm.remaining == 0


def test_genground_min_iter_zero_may_finish_at_once(search):
    llm = FakeLLM(responses=[_plan(finished=True), "Vistula"])
    ans = build_method("genground", llm, search, reranker="none", min_iter=0).answer(QUESTION)
    assert ans.trace.steps[0].notes["stop"] == "finished" and ans.trace.steps[0].queries == []
    assert llm.calls[0].json_schema == PLAN.bounded
    with pytest.raises(ConfigError, match="min_iter"):
        build_method("genground", llm, search, reranker="none", min_iter=3, max_iter=2)


def test_structured_roles_keep_their_declared_bounds():
    # a role's budget covers its schema's worst case, so bounding does not shorten the declared strings
    assert PLAN.bounded["properties"]["sub_question"]["maxLength"] == 120
    assert ASK.bounded["properties"]["answer"]["maxLength"] == 80
    assert GENERATE.bounded["properties"]["answer"]["maxLength"] == 60
    assert GENERATE.bounded["properties"]["reason"]["maxLength"] == 400
    assert PSEUDO.bounded["properties"]["answer"]["maxLength"] == 60


def test_metarag_judgements_and_pseudo_answer_are_decoded_under_schemas(search):
    llm = FakeLLM(responses=[_gen("Paris"), _pseudo("Warsaw"), '"yes"', '"maybe"', '"yes"', '"no"', _gen("Warsaw")])
    ans = _metarag(llm, search, max_iter=2).answer(QUESTION)
    it = ans.trace.steps[1]
    assert [c.role for c in it.llm_calls] == ["generate", "monitor", "internal_knowledge", "sufficiency",
                                              "sufficiency:repair", "entailment"]
    assert llm.calls[1].json_schema == PSEUDO.bounded and it.notes["pseudo_answer"] == "Warsaw"
    assert all(llm.calls[i].json_schema == {"type": "string", "enum": ["yes", "no"]} for i in (2, 3, 5))
    assert it.notes["internal_knowledge"] is True and it.notes["sufficient"] is True and it.notes["entailed"] is False
    assert it.notes["parse_errors"] == ["sufficiency: expected yes or no, got '\"maybe\"'"]


def test_metarag_prompt_only_monitor_and_unusable_judgement_fall_back_visibly(search):
    llm = FakeLLM(responses=[_gen("Paris"), "Warsaw.", "perhaps", "perhaps", "yes", "yes", _gen("Warsaw")])
    ans = _metarag(llm, search, max_iter=2, send_schema=False).answer(QUESTION)
    it = ans.trace.steps[1]
    assert all(c.json_schema is None for c in llm.calls)
    assert it.notes["pseudo_answer"] == "Warsaw" and it.notes["fallbacks"] == ["internal_knowledge: no"]
    assert it.notes["internal_knowledge"] is False and it.llm_calls[3].outcome == "fallback"


def test_genground_json_grounding_stops_at_evidence_and_records_unusable_replies(search):
    llm = FakeLLM(responses=[_plan("Where was Marie Curie born?", "Paris"), "no json", "still none",
                             _ground("Marie Curie was born in Warsaw.", "Warsaw."), _plan(finished=True), "Warsaw"])
    ans = build_method("genground", llm, search, reranker="none", k=4, batch=1).answer(QUESTION)
    first = ans.trace.steps[0]
    assert [c.role for c in first.llm_calls] == ["plan", "ground", "ground:repair", "ground"]
    assert llm.calls[1].json_schema == GROUND.bounded and GROUND.bounded["properties"]["evidence"]["maxLength"] == 200
    assert first.notes["fallbacks"] == ["ground: batch taken as empty"]
    assert first.notes["grounded_batch"] == 2 and first.notes["answer"] == "Warsaw" and llm.remaining == 0
    assert parse_ground_json(_ground("empty.", "x")) == ("", "") and parse_ground_json(_ground("", "")) == ("", "")
