"""Iter-RetGen (Shao et al., Findings of EMNLP 2023) as DualRAG runs it (methods.md §3.6):

    y_0 <- ""
    for t = 1 .. T:                                   (T = iterations, 3)
        q_t <- question                if t = 1
               question + " " + y_{t-1} otherwise     # retrieval-augmented by the last generation
        docs <- rerank(q_t, retrieve(q_t, candidates))[:k]     (no reranker: retrieve(q_t, k))
        y_t <- LLM(docs, question)                    # a chain of thought ending in ANSWER_MARKER
    answer <- text after ANSWER_MARKER in y_T, or one brief answer call over docs + y_T if it is missing

The last generation's exchange is marked as IRCoT's is (``parsed`` / ``repaired`` / ``fallback``).
"""

from __future__ import annotations

from tandem.llm.base import LLM, Message
from tandem.methods.answers import (
    ANSWER_MARKER,
    COT_DEMO,
    answer_style,
    brief_answer_messages,
    clean_answer,
    extract_answer,
    marker_outcome,
)
from tandem.methods.base import (
    Search,
    call_llm,
    format_docs,
    mark_exchange,
    search_reranked,
)
from tandem.methods.iter_retgen.settings import IterRetGenSettings
from tandem.methods.parts import searching_with_reranker
from tandem.registry import METHODS
from tandem.rerank.base import Reranker
from tandem.types import Answer, Document, Question, Step, Trace

INSTRUCTION = (
    "Answer the question using the documents. Reason step by step in a few short sentences, then "
    f"finish with '{ANSWER_MARKER} ' followed by the answer in a few words."
)


class IterRetGen:
    """Iterative retrieval-generation synergy: each generation becomes part of the next retrieval query."""

    name = "iter_retgen"

    def __init__(self, llm: LLM, search: Search, settings: IterRetGenSettings | None = None, *,
                 reranker: Reranker | None = None) -> None:
        s = settings or IterRetGenSettings()
        self.llm, self.search, self.reranker = llm, search, reranker
        self.iterations, self.k, self.candidates = s.iterations, s.k, s.candidates
        self.temperature, self.max_tokens = s.temperature, s.max_tokens

    @staticmethod
    def _messages(question: str, docs: list[Document]) -> list[Message]:
        user = (f"Example:\n{COT_DEMO}\n\nNow the real task.\nDocuments:\n{format_docs(docs)}\nQuestion: {question}\n"
                "Reasoning:\n")
        return [Message("system", INSTRUCTION), Message("user", user)]

    def answer(self, question: Question) -> Answer:
        trace = Trace()
        generation = ""
        docs: list[Document] = []
        for t in range(self.iterations):
            query = f"{question.text} {generation}".strip() if t else question.text
            step = trace.add(Step(f"iteration {t + 1}", queries=[query]))
            step.hits, docs = search_reranked(self.search, self.reranker, query, self.k, self.candidates)
            trace.read([d.id for d in docs])
            generation = call_llm(self.llm, step, "generate", self._messages(question.text, docs),
                                  max_tokens=self.max_tokens, temperature=self.temperature)
            step.notes["generation"] = generation
        found = extract_answer(generation)
        mark_exchange(trace.steps[-1], "generate", marker_outcome(generation),
                      "no answer marker in the last generation: one brief answer call")
        if found is not None:
            return Answer(question.id, found, trace, self.name)
        final = trace.add(Step("answer", notes={"reason": "no answer marker in the last generation"}))
        text = call_llm(self.llm, final, "answer",
                        brief_answer_messages(question.text, docs, "Reasoning so far:\n" + generation,
                                              style=answer_style(self.llm)),
                        max_tokens=32, temperature=self.temperature)
        return Answer(question.id, clean_answer(text), trace, self.name)


METHODS.register("iter_retgen", settings=IterRetGenSettings, needs=("index",))(searching_with_reranker("iter_retgen", IterRetGen))
