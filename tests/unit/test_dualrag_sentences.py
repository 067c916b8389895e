"""DualRAG's sentence-picking Summarizer (``summary="sentences"``): numbered sentences in, the picked
sentences word for word in the outline, nothing a document does not say."""

from __future__ import annotations

import json

import pytest
from dualrag_script import QUESTION, Roles, plan, think

from tandem.errors import ParseError
from tandem.methods.answers import split_sentences
from tandem.methods.dualrag import sentences as S
from tandem.testing.fake_llm import FakeLLM
from tandem.types import Document


def picks(*numbers: int) -> str:
    return json.dumps({"sentences": list(numbers)})


def test_sentences_split_after_marks_but_not_after_abbreviations_or_initials():
    text = 'Dr. Smith met J. R. R. Tolkien in the U.S. Navy. He said "yes." Why?\nA new line'
    assert split_sentences(text) == ["Dr. Smith met J. R. R. Tolkien in the U.S. Navy.", 'He said "yes."', "Why?",
                                     "A new line"]


def test_numbers_run_across_documents_and_notes_keep_the_picked_sentences_word_for_word():
    docs = [Document("a", "Berea College", "Berea College is a college in Kentucky. It was founded in 1855."),
            Document("b", "Kentucky", "Kentucky is a state.")]
    body, lines = S.numbered(docs)
    assert "[1] Berea College is a college in Kentucky. [2] It was founded in 1855." in body
    assert "##### Kentucky\n\n[3] Kentucky is a state." in body
    assert S.notes(lines, [2, 1, 99, 0]) == "Berea College: Berea College is a college in Kentucky. It was founded in 1855."
    assert S.notes(lines, [3, 2]) == "Berea College: It was founded in 1855.\nKentucky: Kentucky is a state."
    assert S.notes(lines, []) == S.notes(lines, [42]) == "None"
    with pytest.raises(ParseError, match="sentence numbers"):
        S.parse_picks('{"notes": "Berea College was founded in 1855."}')


def test_the_outline_holds_the_picked_sentences_and_an_empty_pick_drops_the_entity(search):
    roles = Roles(reasoner=[think("I need the birthplace of Marie Curie."),
                            think("Marie Curie was born in Warsaw. I need the river of Warsaw."),
                            think("Warsaw is on the Vistula, so the answer is the Vistula.", retrieve=False)],
                  entity=[plan(("Marie Curie", ["Marie Curie born"])), plan(("Paris", ["Paris river"]))])
    roles.llms["summarizer"] = FakeLLM(responses=[picks(1, 77), picks()])
    ans = roles.method(search, summary="sentences", k=1).answer(QUESTION)
    first, second = roles.prompts("summarizer")
    assert "[1] Marie Curie was born in Warsaw and won two Nobel Prizes." in first and '{"sentences":[1,2]}' in first
    steps = {s.name: s for s in ans.trace.steps}
    assert steps["iteration 1"].notes["summaries"] == {
        "Marie Curie": "Marie Curie: Marie Curie was born in Warsaw and won two Nobel Prizes."}
    assert steps["iteration 2"].notes["summaries"] == {"Paris": None}  # nothing picked: not kept
    outline = ans.trace.steps[-1].notes["outline"]
    assert "#### Marie Curie" in outline and "Paris" not in outline
    assert "fallbacks" not in steps["iteration 1"].notes


def test_a_picks_reply_is_a_well_formed_summarizer_reply_for_the_sft_export():
    from tandem.methods.dualrag.parse import parses_for

    assert parses_for("summarizer", picks(2, 3)) and parses_for("summarizer", '{"notes": "Founded in 1855."}')
    assert not parses_for("summarizer", '{"sentences": ["two"]}') and not parses_for("reasoner", picks(1))
