"""benchmarks/summarizer_replay.py: what a Summarizer call's notes should have kept."""

from __future__ import annotations

from tests.conftest import benchmark_script

from tandem.eval.qa_metrics import normalize_answer
from tandem.types import Question

KISS = ("Kiss and Tell (1945 film)", "Kiss and Tell is a 1945 comedy film starring then 17-year-old Shirley Temple "
        "as Corliss Archer.")
TEMPLE = ("Shirley Temple", "Shirley Temple Black was an American actress who served as Chief of Protocol.")
OTHER = ("Meet Corliss Archer", "Meet Corliss Archer is a program from radio's Golden Age.")
QUESTION = Question(id="q", text="What government position was held by the woman who portrayed Corliss Archer?",
                    answers=("Chief of Protocol",), gold_doc_ids=("kiss", "temple"))
GOLD_TITLES = {KISS[0], TEMPLE[0]}


def to_keep(docs):
    return benchmark_script("summarizer_replay").to_keep(docs, QUESTION, GOLD_TITLES, normalize_answer)


def test_the_bridge_is_what_the_first_hop_keeps():
    # the film's passage names the actress, whose passage is the other gold one: her name is to be kept
    assert to_keep([OTHER, KISS]) == {"shirley temple"}


def test_the_answer_is_kept_where_a_document_holds_it():
    assert to_keep([TEMPLE, OTHER]) == {"chief of protocol"}
    assert to_keep([KISS, TEMPLE]) == {"chief of protocol"}  # both gold read: the bridge is not wanted twice


def test_nothing_to_keep_in_unrelated_documents():
    assert to_keep([OTHER]) == set()
