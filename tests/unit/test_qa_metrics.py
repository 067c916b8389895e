"""Answer metrics on known cases."""

from __future__ import annotations

import pytest

from tandem.eval.judge import best_of, judge, score_prediction
from tandem.eval.qa_metrics import (
    answer_scores,
    cover_match,
    exact_match,
    f1_score,
    gold_doc_recall,
    normalize_answer,
    rouge_l,
)
from tandem.testing.fake_llm import FakeLLM


def test_normalization():
    assert normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert normalize_answer("A, an; the.") == ""


def test_exact_match_max_over_golds():
    assert exact_match("the Vistula", ["Vistula River", "Vistula"]) == 1.0
    assert exact_match("Vistula river basin", ["Vistula"]) == 0.0


def test_f1_known_value():
    # pred tokens: chief protocol of united states (5) ; gold: chief of protocol (3) ; overlap 3
    assert f1_score("Chief of Protocol of the United States", ["Chief of Protocol"]) == pytest.approx(2 * (3 / 6) * 1 / (3 / 6 + 1))
    assert f1_score("Paris", ["Lyon", "Paris"]) == 1.0


def test_yes_no_rule():
    assert f1_score("yes it is", ["yes"]) == 0.0  # a yes/no gold needs the exact yes/no
    assert f1_score("yes", ["yes"]) == 1.0
    assert f1_score("no", ["yes"]) == 0.0
    assert f1_score("yes", ["yes indeed"]) == 0.0  # special tokens must match exactly


def test_cover_and_rouge():
    assert cover_match("It was Shirley Temple, the actress", ["Shirley Temple"]) == 1.0
    assert cover_match("Temple", ["Shirley Temple"]) == 0.0
    assert rouge_l("w b c d", ["w x c d"]) == pytest.approx(0.75)
    assert answer_scores("Paris", ["Paris"]) == {"em": 1.0, "f1": 1.0, "acc": 1.0, "rouge_l": 1.0}


def test_gold_doc_recall():
    assert gold_doc_recall(["a", "b"], ["b", "c"]) == 0.5
    assert gold_doc_recall([], ["b"]) is None


def test_judge_max_over_golds_and_retry():
    llm = FakeLLM(responses=["Maybe?", "No.", "Yes"])
    assert judge(llm, "q", "pred", ["g1", "g2"]) == 1.0
    assert len(llm.calls) == 3 and "Ground-truth: g2" in llm.calls[2].last_user
    assert judge(FakeLLM(responses=["No", "No"]), "q", "p", ["a", "b"]) == 0.0


def test_reanswer_takes_best_of_raw_and_rewritten():
    llm = FakeLLM(responses=["Warsaw"])
    scores, rewritten = score_prediction("Where?", "She was born in the city of Warsaw in 1867", ["Warsaw"], reanswer_llm=llm)
    assert rewritten == "Warsaw"
    assert scores["em"] == 1.0 and scores["acc"] == 1.0
    assert best_of({"em": 0.0, "f1": 0.5}, {"em": 1.0, "f1": 0.2}) == {"em": 1.0, "f1": 0.5}
