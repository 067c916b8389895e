"""IRCoT (Trivedi et al., ACL 2023) as DualRAG and FlashRAG run it (methods.md §3.6):

    docs <- retrieve(question)
    repeat at most max_steps times:
        t <- LLM(instruction, demo, docs, question, thoughts so far)   # ONE chain-of-thought sentence
        thoughts += t
        if ANSWER_MARKER in t: break
        docs <- retrieve(t)            (policy "replace", DualRAG)  or  docs + retrieve(t)  ("accumulate", FlashRAG)
    answer <- text after ANSWER_MARKER, or one brief answer call over docs + thoughts if it never came

Every question's "reason" exchange is marked (:func:`tandem.methods.base.mark_exchange`): ``parsed`` when
the thought carries the exact marker, ``repaired`` when only the lenient one ("the answer is:"), and
``fallback`` when no marker came (the brief answer call), so ``fallback_rate`` counts it.
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
    first_sentence,
    marker_outcome,
)
from tandem.methods.base import (
    Search,
    call_llm,
    format_docs,
    mark_exchange,
    search_reranked,
)
from tandem.methods.ircot.settings import IRCoTSettings
from tandem.methods.parts import searching_with_reranker
from tandem.registry import METHODS
from tandem.rerank.base import Reranker
from tandem.types import Answer, Document, Question, Step, Trace

INSTRUCTION = (
    "Answer the question by reasoning one step at a time over the documents. Each reply adds exactly "
    f"ONE short sentence to the reasoning. When the reasoning is complete, reply with '{ANSWER_MARKER} ' "
    "followed by the answer in a few words."
)


class IRCoT:
    """Interleaving retrieval with chain-of-thought, one sentence per step."""

    name = "ircot"

    def __init__(self, llm: LLM, search: Search, settings: IRCoTSettings | None = None, *,
                 reranker: Reranker | None = None) -> None:
        s = settings or IRCoTSettings()
        self.llm, self.search, self.k, self.max_steps, self.policy = llm, search, s.k, s.max_steps, s.policy
        self.reranker, self.candidates = reranker, s.candidates
        self.temperature, self.max_tokens = s.temperature, s.max_tokens

    def _messages(self, question: str, docs: list[Document], thoughts: list[str]) -> list[Message]:
        user = (f"Example:\n{COT_DEMO}\n\nNow the real task.\nDocuments:\n{format_docs(docs)}\nQuestion: {question}\n"
                "Reasoning:\n" + "".join(t + "\n" for t in thoughts))
        return [Message("system", INSTRUCTION), Message("user", user)]

    def _retrieve(self, trace: Trace, step: Step, query: str, docs: list[Document]) -> list[Document]:
        hits, new = search_reranked(self.search, self.reranker, query, self.k, self.candidates)
        step.queries.append(query)
        step.hits = hits
        if self.policy == "accumulate":
            seen = {d.id for d in docs}
            new = docs + [d for d in new if d.id not in seen]
        trace.read([d.id for d in new])
        return new

    def answer(self, question: Question) -> Answer:
        trace = Trace()
        docs = self._retrieve(trace, trace.add(Step("retrieve")), question.text, [])
        thoughts: list[str] = []
        for i in range(self.max_steps):
            step = trace.add(Step(f"reason {i + 1}"))
            raw = call_llm(self.llm, step, "reason", self._messages(question.text, docs, thoughts),
                           max_tokens=self.max_tokens, temperature=self.temperature, stop=("\n",))
            thought = first_sentence(raw)
            thoughts.append(thought)
            step.notes["thought"] = thought
            found = extract_answer(thought)
            if found is not None:
                step.notes["stop"] = "answer marker"
                mark_exchange(step, "reason", marker_outcome(thought))
                return Answer(question.id, found, trace, self.name)
            if not thought:
                step.notes["stop"] = "empty thought"
                break
            if i + 1 < self.max_steps:
                docs = self._retrieve(trace, step, thought, docs)
        mark_exchange(step, "reason", "fallback", "no answer marker: one brief answer call")
        final = trace.add(Step("answer", notes={"reason": "no answer marker within the step cap"}))
        text = call_llm(self.llm, final, "answer",
                        brief_answer_messages(question.text, docs, "Reasoning so far:\n" + "\n".join(thoughts),
                                              style=answer_style(self.llm)),
                        max_tokens=32, temperature=self.temperature)
        return Answer(question.id, clean_answer(text), trace, self.name)


METHODS.register("ircot", settings=IRCoTSettings, needs=("index",))(searching_with_reranker("ircot", IRCoT))
