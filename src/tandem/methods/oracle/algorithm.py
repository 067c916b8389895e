"""Oracle: NativeRAG's reader fed the gold evidence (methods.md §3.6).

``mode="sentence"`` gives the gold supporting sentences where the dataset has them (HotpotQA and
2Wiki originals), else the gold paragraphs; ``mode="paragraph"`` always gives paragraphs.
"""

from __future__ import annotations

from tandem.errors import DataError
from tandem.index.store import DocStore
from tandem.llm.base import LLM
from tandem.methods.answers import answer_style, brief_answer_messages, clean_answer
from tandem.methods.base import call_llm
from tandem.methods.oracle.settings import OracleSettings
from tandem.methods.parts import Parts
from tandem.registry import METHODS
from tandem.types import Answer, Document, Question, Step, Trace


class Oracle:
    """Answer from gold evidence: an upper bound for the reader."""

    name = "oracle"

    def __init__(self, llm: LLM, store: DocStore, settings: OracleSettings | None = None) -> None:
        s = settings or OracleSettings()
        self.llm, self.store, self.mode = llm, store, s.mode
        self.temperature, self.max_tokens = s.temperature, s.max_tokens

    def evidence(self, question: Question) -> list[Document]:
        """The gold paragraphs, or one pseudo-document holding the gold sentences."""
        if not question.gold_doc_ids:
            raise DataError(f"question {question.id} has no gold documents: the oracle cannot answer it")
        sentences = question.metadata.get("supporting_sentences") or []
        if self.mode == "sentence" and sentences:
            return [Document("gold-sentences", "", " ".join(sentences))]
        return [self.store.get(g) for g in question.gold_doc_ids if g in self.store]

    def answer(self, question: Question) -> Answer:
        trace = Trace()
        docs = self.evidence(question)
        trace.read(list(question.gold_doc_ids))
        step = trace.add(Step("answer", notes={"evidence": self.mode}))
        text = call_llm(self.llm, step, "answer", brief_answer_messages(question.text, docs, style=answer_style(self.llm)),
                        max_tokens=self.max_tokens, temperature=self.temperature)
        return Answer(question.id, clean_answer(text), trace, self.name)


@METHODS.register("oracle", settings=OracleSettings, needs=("gold",))
def build(parts: Parts, s: OracleSettings) -> Oracle:
    """Oracle over the store that resolves the dataset's gold passages."""
    return Oracle(parts.llm, parts.need_store("oracle"), s)
