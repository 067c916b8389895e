"""Direct: the LLM answers from its own knowledge, no retrieval (DualRAG's baseline, methods.md §3.6)."""

from __future__ import annotations

from tandem.llm.base import LLM
from tandem.methods.answers import answer_style, brief_answer_messages, clean_answer
from tandem.methods.base import call_llm
from tandem.methods.direct.settings import DirectSettings
from tandem.methods.parts import Parts
from tandem.registry import METHODS
from tandem.types import Answer, Question, Step, Trace


class Direct:
    """Closed-book answer with the brevity prompt."""

    name = "direct"

    def __init__(self, llm: LLM, settings: DirectSettings | None = None) -> None:
        s = settings or DirectSettings()
        self.llm, self.temperature, self.max_tokens = llm, s.temperature, s.max_tokens

    def answer(self, question: Question) -> Answer:
        trace = Trace()
        step = trace.add(Step("answer"))
        text = call_llm(self.llm, step, "answer", brief_answer_messages(question.text, style=answer_style(self.llm)),
                        max_tokens=self.max_tokens, temperature=self.temperature)
        return Answer(question.id, clean_answer(text), trace, self.name)


@METHODS.register("direct", settings=DirectSettings)
def build(parts: Parts, s: DirectSettings) -> Direct:
    """Direct over the run's LLM (no index)."""
    return Direct(parts.llm, s)
