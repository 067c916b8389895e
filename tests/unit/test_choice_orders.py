"""A question that offers a choice, answered with its options in both orders (tandem.methods.choices)."""

from __future__ import annotations

import math

import pytest
from tests.conftest import shared

from tandem.compose import build_method
from tandem.corpus.loaders import load_dataset
from tandem.errors import ConfigError
from tandem.llm.base import LLMResponse
from tandem.methods.answers import offers_a_choice
from tandem.methods.choices import CHOICE_TOKENS, names_an_option, option_answer, option_logprobs, parse_choice
from tandem.testing.fake_llm import FakeLLM
from tandem.types import Question

WOOLF = Question("q3", "Who was born earlier, Emma Bull or Virginia Woolf?", ("Adeline Virginia Woolf",))


def _tokens(*pairs: tuple[str, float]) -> LLMResponse:
    return LLMResponse(text=pairs[0][0], prompt_tokens=9, completion_tokens=1, latency_s=0.0, finish_reason="length",
                       model="fake", first_tokens=pairs)


@pytest.mark.parametrize(("question", "options", "swapped"), [
    ("Who was born earlier, Emma Bull or Virginia Woolf?", ("Emma Bull", "Virginia Woolf"),
     "Who was born earlier, Virginia Woolf or Emma Bull?"),
    ("Which band, Letters to Cleo or Screaming Trees, had more members?", ("Letters to Cleo", "Screaming Trees"),
     "Which band, Screaming Trees or Letters to Cleo, had more members?"),
    ("Is the Marsilea or the Brabejum the genus of more species?", ("Marsilea", "Brabejum"),
     "Is the Brabejum or the Marsilea the genus of more species?"),
    ("Who was born first Mahbub ul Haq or Ibn Arabi?", ("Mahbub ul Haq", "Ibn Arabi"),
     "Who was born first Ibn Arabi or Mahbub ul Haq?"),
    ("Which of these battles occurred earlier--the Battle of Peleliu or the Battle of Belleau Wood?",
     ("the Battle of Peleliu", "the Battle of Belleau Wood"),
     "Which of these battles occurred earlier--the Battle of Belleau Wood or the Battle of Peleliu?"),
    ("Which is a fish, salmon or oak?", ("salmon", "oak"), "Which is a fish, oak or salmon?"),
    ("In 2001, was Emma Bull or Virginia Woolf older?", ("Emma Bull", "Virginia Woolf"),
     "In 2001, was Virginia Woolf or Emma Bull older?"),
    ("Emma Bull or Virginia Woolf: who was born first?", ("Emma Bull", "Virginia Woolf"),
     "Virginia Woolf or Emma Bull: who was born first?"),
])
def test_the_options_are_read_from_the_question_and_swapped_in_place(question, options, swapped):
    choice = parse_choice(question)
    assert choice is not None and choice.options == options and choice.swapped() == swapped


@pytest.mark.parametrize("question", ["Is salmon or oak a fish?", "Who is older?", "Tea or coffee or water?",
                                      "Which is older, Rome or rome?"])
def test_a_question_without_two_named_options_is_not_a_choice(question):
    assert parse_choice(question) is None


def test_nearly_every_choice_question_of_hotpotqa_is_read():
    questions = [q.text for q in load_dataset(shared("hotpotqa/dev500.jsonl")).questions if offers_a_choice(q.text)]
    read = [parse_choice(q) for q in questions]
    assert len(questions) == 124 and sum(c is not None for c in read) == 123  # "... during Oranjegekte or to celebrate"
    swapped_back = [parse_choice(c.swapped()) for c in read if c is not None]
    assert all(b is not None and b.swapped() == c.question for b, c in zip(swapped_back, filter(None, read), strict=True))
    options = {c.question: c.options for c in read if c is not None}
    assert options["Which film was Oscar nominated, LaLee's Kin: The Legacy of Cotton or Gimme Shelter, the 1970 "
                   "Rolling Stones documentary?"] == ("LaLee's Kin: The Legacy of Cotton", "Gimme Shelter")
    assert options["Which airport is busier, Palm Springs International Airport or Trenton\u2013Mercer Airport?"] == (
        "Palm Springs International Airport", "Trenton\u2013Mercer Airport")


@pytest.mark.parametrize(("question", "reply", "answer"), [
    ("Which game was released first, Kill Doctor Lucky or Icehouse pieces?", "Icehouse pieces was released in 1987",
     "Icehouse pieces"),
    ("Which of these battles occurred earlier--the Battle of Peleliu or the Battle of Belleau Wood?",
     "The Battle of Belleau Wood occurred earlier", "the Battle of Belleau Wood"),
    ("Who died first, George Archainbaud or Ralph Murphy?", "George Archainbaud, in 1959", "George Archainbaud"),
    ("Who died first, George Archainbaud or Ralph Murphy?", "George Archainbaud", "George Archainbaud"),
    ("Did Franki Valli sing with Hellogoodbye or The Four Seasons?", "Franki Valli singing with The Four Seasons",
     "Franki Valli singing with The Four Seasons"),  # does not open with an option
    ("Who died first, George Archainbaud or Ralph Murphy?", "George Archainbaudx", "George Archainbaudx"),
    ("Where was George Archainbaud born?", "George Archainbaud was born in Paris", "George Archainbaud was born in Paris"),
    ("Which is older, Emma or Emma Bull?", "Emma Bull was born in 1954", "Emma Bull"),  # the longer option first
])
def test_a_reply_that_opens_with_an_option_and_goes_on_is_cut_to_the_option(question, reply, answer):
    assert option_answer(parse_choice(question), reply) == answer


def test_nativerag_answers_with_the_option_its_reply_opens_with(search):
    question = Question("q4", "Which game was released first, Kill Doctor Lucky or Icehouse pieces?", ("Icehouse pieces",))
    llm = FakeLLM(responses=["Icehouse pieces was released in 1987."])
    assert build_method("naive_rag", llm, search, k=2).answer(question).text == "Icehouse pieces"


def test_an_options_log_probability_is_the_mass_of_the_tokens_that_begin_it_alone():
    pairs = [("Emma", math.log(0.5)), (" Emma", math.log(0.1)), ("Virginia", math.log(0.2)), ("E", math.log(0.05))]
    first, second = option_logprobs(pairs, ("Emma Bull", "Virginia Woolf"))
    assert first == pytest.approx(math.log(0.65)) and second == pytest.approx(math.log(0.2))
    first, second = option_logprobs([("Emma", -0.2), ("Both", -2.5)], ("Emma Bull", "Virginia Woolf"))
    assert (first, second) == pytest.approx((-0.2, -2.5))  # the absent option: the least likely token's, a bound from above
    assert option_logprobs([("Both", -0.1)], ("Emma Bull", "Virginia Woolf")) is None
    assert option_logprobs([("Battle", -0.1)], ("the Battle of Guam", "Battle of Manila")) is None  # begins both


def test_both_orders_cancel_a_pull_towards_the_first_option(search):
    # as written the first option (Emma) leads by 0.5 nats; swapped, the first (Virginia) leads by 2.0
    as_written = _tokens(("Emma", -0.5), ("Virginia", -1.0), ("The", -3.0))
    swapped = _tokens(("Virginia", -0.2), ("Emma", -2.2), ("The", -3.0))
    llm = FakeLLM(responses=[as_written, swapped], tells_first_tokens=True)
    ans = build_method("naive_rag", llm, search, k=2, choice_orders="both").answer(WOOLF)
    step = ans.trace.steps[-1]
    assert ans.text == "Virginia Woolf" and len(llm.calls) == 2
    assert all(c.first_tokens == CHOICE_TOKENS and c.max_tokens == 1 for c in llm.calls)
    assert "Emma Bull or Virginia Woolf?" in llm.calls[0].last_user
    assert "Virginia Woolf or Emma Bull?" in llm.calls[1].last_user
    assert llm.calls[0].last_user.split("Question:")[0] == llm.calls[1].last_user.split("Question:")[0]  # same docs
    assert step.notes["choice"] == {"options": ["Emma Bull", "Virginia Woolf"], "logprobs": [-2.7, -1.2]}
    assert [c.outcome for c in step.llm_calls] == [None, "parsed"]  # one answer exchange, read as asked


def test_a_choice_the_first_tokens_cannot_decide_is_the_reply_counted_as_a_fallback(search):
    undecided = _tokens(("Both", -0.1), ("Neither", -2.0))
    llm = FakeLLM(responses=[undecided, "Emma Bull"], tells_first_tokens=True)
    ans = build_method("naive_rag", llm, search, k=2, choice_orders="both").answer(WOOLF)
    step = ans.trace.steps[-1]
    assert ans.text == "Emma Bull" and llm.calls[-1].first_tokens == 0
    assert step.llm_calls[-1].outcome == "fallback" and "neither option" in step.notes["fallbacks"][0]
    llm = FakeLLM(responses=["Virginia Woolf"])  # cannot tell first tokens at all
    ans = build_method("naive_rag", llm, search, k=2, choice_orders="both").answer(WOOLF)
    assert ans.text == "Virginia Woolf" and ans.trace.steps[-1].llm_calls[-1].outcome == "fallback"


def test_unnamed_asks_both_orders_only_where_the_reply_names_neither_option(search):
    # "Which film has the director born earlier, ...?" answered with a director: the options decide
    question = Question("q5", "Which film came out first, Nurse Betty or Vaa Arugil Vaa?", ("Vaa Arugil Vaa",))
    as_written = _tokens(("N", -0.9), ("Nurse", -1.0), ("Vaa", -1.2))
    swapped = _tokens(("Vaa", -0.3), ("Nurse", -2.0))
    llm = FakeLLM(responses=["Neil LaBute", as_written, swapped], tells_first_tokens=True)
    ans = build_method("naive_rag", llm, search, k=2, choice_orders="unnamed").answer(question)
    step = ans.trace.steps[-1]
    assert ans.text == "Vaa Arugil Vaa" and [c.first_tokens for c in llm.calls] == [0, CHOICE_TOKENS, CHOICE_TOKENS]
    assert step.notes["choice"]["reply"] == "Neil LaBute" and "fallbacks" not in step.notes
    llm = FakeLLM(responses=["Nurse Betty, in 2000"], tells_first_tokens=True)  # names an option: one call
    ans = build_method("naive_rag", llm, search, k=2, choice_orders="unnamed").answer(question)
    assert ans.text == "Nurse Betty" and len(llm.calls) == 1
    undecided = _tokens(("Neil", -0.1))
    llm = FakeLLM(responses=["Neil LaBute", undecided], tells_first_tokens=True)
    ans = build_method("naive_rag", llm, search, k=2, choice_orders="unnamed").answer(question)
    notes = ans.trace.steps[-1].notes
    assert ans.text == "Neil LaBute" and "neither option" in notes["choice"]["undecided"] and "fallbacks" not in notes


def test_one_order_alone_does_not_decide(search):
    as_written = _tokens(("Emma", -0.5), ("Virginia", -1.0))
    swapped = _tokens(("Both", -0.1), ("Neither", -2.0))  # neither option: the pull would go uncancelled
    llm = FakeLLM(responses=[as_written, swapped, "Emma Bull"], tells_first_tokens=True)
    ans = build_method("naive_rag", llm, search, k=2, choice_orders="both").answer(WOOLF)
    step = ans.trace.steps[-1]
    assert ans.text == "Emma Bull" and llm.calls[-1].first_tokens == 0 and step.llm_calls[-1].outcome == "fallback"
    assert "of one order" in step.notes["fallbacks"][0] and "choice" not in step.notes


def test_reasoned_choices_ask_no_first_tokens(search):
    llm = FakeLLM(responses=["Woolf 1882, Bull 1954. So the answer is: Virginia Woolf"], tells_first_tokens=True)
    ans = build_method("naive_rag", llm, search, k=2, choice_orders="both", reason_choices=True).answer(WOOLF)
    assert ans.text == "Virginia Woolf" and [c.first_tokens for c in llm.calls] == [0]


def test_a_reply_names_an_option_by_whole_words():
    choice = parse_choice("Who is older, Arnold Palmer or Tiger Woods?")
    assert names_an_option(choice, "Palmer") and names_an_option(choice, "Arnold Palmer, the golfer")
    assert not names_an_option(choice, "no") and not names_an_option(choice, "Arnoldo") and not names_an_option(choice, "")


def test_the_models_own_choice_orders_is_the_default(search):
    for own, setting, calls in (("both", "model", 2), ("asked", "model", 1), (None, "model", 1),
                                ("both", "asked", 1), (None, "both", 2), ("unnamed", "model", 3)):
        tokens = [_tokens(("Emma", -0.5), ("Virginia", -1.0))] * 2
        replies = {1: ["Emma Bull"], 2: tokens, 3: ["Bull's book", *tokens]}[calls]
        llm = FakeLLM(responses=replies, tells_first_tokens=True)
        llm.choice_orders = own  # the local backend sets it from the model's ladder entry
        ans = build_method("naive_rag", llm, search, k=2, choice_orders=setting).answer(WOOLF)
        assert len(llm.calls) == calls and ans.text == "Emma Bull", (own, setting)
    with pytest.raises(ConfigError, match="choice_orders"):
        build_method("naive_rag", FakeLLM(), search, k=2, choice_orders="shuffled")
