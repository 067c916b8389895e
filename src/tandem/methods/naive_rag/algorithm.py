"""NativeRAG: retrieve top-k with the question, optionally rerank, answer from the documents
(methods.md §3.6; DualRAG's code keeps reranker scores > 0 and samples at temperature 0.3 —
both are settings here, with deterministic decoding by default)."""

from __future__ import annotations

from functools import partial

from tandem.llm.base import LLM
from tandem.methods.answers import (
    REASONING_TOKENS,
    answer_style,
    asks_yes_or_no,
    brief_answer_messages,
    clean_answer,
    reasoned_answer,
    reasons_choice,
    verdict_by_margin,
    yes_no_threshold,
)
from tandem.methods.base import Search, call_llm, mark_exchange, search_reranked
from tandem.methods.choices import choice_orders, choose_by_both_orders, names_an_option, option_answer, parse_choice
from tandem.methods.naive_rag.settings import NaiveRAGSettings
from tandem.methods.parts import searching_with_reranker
from tandem.registry import METHODS
from tandem.rerank.base import Reranker
from tandem.types import Answer, Question, Step, Trace


class NaiveRAG:
    """Retrieve, (rerank,) read, answer."""

    name = "naive_rag"

    def __init__(self, llm: LLM, search: Search, settings: NaiveRAGSettings | None = None, *,
                 reranker: Reranker | None = None) -> None:
        s = settings or NaiveRAGSettings()
        self.llm, self.search, self.k, self.candidates = llm, search, s.k, s.candidates
        self.reranker, self.temperature, self.max_tokens = reranker, s.temperature, s.max_tokens
        self.best_last, self.question_first, self.reason_choices = s.doc_order == "best_last", s.question_first, s.reason_choices
        self.yes_no_threshold = yes_no_threshold(llm, s.yes_no_threshold)
        self.choice_orders = choice_orders(llm, s.choice_orders)

    def answer(self, question: Question) -> Answer:
        trace = Trace()
        step = trace.add(Step("retrieve", queries=[question.text]))
        hits, docs = search_reranked(self.search, self.reranker, question.text, self.k, self.candidates)
        step.hits = hits
        trace.read([d.id for d in docs])
        answer_step = trace.add(Step("answer"))
        shown = docs[::-1] if self.best_last else docs  # best_last: the best-ranked document next to the question
        style = answer_style(self.llm)
        reasoned = reasons_choice(question.text, style, self.reason_choices)  # a choice: facts first, then the answer
        messages = brief_answer_messages(question.text, shown, style=style, question_first=self.question_first,
                                         reason_choices=self.reason_choices)
        choice = None if reasoned else parse_choice(question.text)  # read once: the options, and the reply by them
        ask_both = partial(brief_answer_messages, docs=shown, style=style, question_first=self.question_first)
        fell_back = ""
        if self.yes_no_threshold is not None and asks_yes_or_no(question.text):
            verdict, fell_back = verdict_by_margin(self.llm, answer_step, messages, self.yes_no_threshold)
            if verdict is not None:
                return Answer(question.id, verdict, trace, self.name)
        elif choice is not None and self.choice_orders == "both":  # the options in both orders: no position's pull
            option, fell_back = choose_by_both_orders(self.llm, answer_step, choice, ask_both)
            if option is not None:
                return Answer(question.id, option, trace, self.name)
        text = call_llm(self.llm, answer_step, "answer", messages, temperature=self.temperature,
                        max_tokens=max(self.max_tokens, REASONING_TOKENS) if reasoned else self.max_tokens)
        if fell_back:
            mark_exchange(answer_step, "answer", "fallback", f"{fell_back}: the greedy reply")
        answer = reasoned_answer(text) if reasoned else option_answer(choice, clean_answer(text))
        if choice is not None and self.choice_orders == "unnamed" and not names_an_option(choice, answer):
            option, why = choose_by_both_orders(self.llm, answer_step, choice, ask_both, mark=False)
            answer_step.notes.setdefault("choice", {}).update(reply=answer, **({"undecided": why} if why else {}))
            answer = option or answer  # undecided: the reply stands (it was read as asked, so no fallback)
        return Answer(question.id, answer, trace, self.name)


METHODS.register("naive_rag", settings=NaiveRAGSettings, needs=("index",))(searching_with_reranker("naive_rag", NaiveRAG))
