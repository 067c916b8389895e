"""MetaRAG (Zhou et al., WWW 2024) as DualRAG runs it (methods.md §3.6), compactly:

    docs <- rerank(question, retrieve(question, candidates))[:k]
    suggestion <- ""
    for i = 1 .. max_iter:
        (reason, answer) <- LLM(docs, question, suggestion)               # JSON {reason, answer}
        if i = max_iter: break
        monitor: pseudo <- LLM(docs, question)                            # brevity prompt, JSON {answer}
                 if cos(E(answer), E(pseudo)) > threshold: break          # accepted
        critic:  internal <- LLM yes/no: can you answer from your own knowledge?   # each under a yes/no enum
                 sufficient <- LLM yes/no: do the documents suffice?
                 if not sufficient: q' <- LLM rewrite(question)[:64]; docs <- docs ∪ rerank(q', retrieve(q'))
                 else: entailed <- LLM yes/no: does the reason entail the answer?
                 suggestion <- a sentence per diagnosis
    answer <- the last generation's answer

Departures (docs/methods/baselines.md): the monitor's pseudo-answer comes from the same LLM reading the
documents (the authors use a T5 expert, gaussalgo/T5-LM-Large_Canard-HotpotQA-rephrase), compared by
cosine with the index's encoder or the embedded MiniLM (the authors' MiniLM); the entailment check is an
LLM yes/no (the authors: t5_xxl_true_nli); the critic's basic-error JSON check is the generator's own
schema (an unusable reply after the repair round is a counted fallback whose first line is the answer).
The pseudo-answer and the three yes/no checks are structured roles too (``{"answer"}`` bounded like the
generator's answer; the string enum ``"yes"|"no"``), decoded under their schemas where the backend can
(``send_schema``; off: the brevity prompt's text and leniently parsed yes/no text), so
a small model's sentences neither dodge the judgement nor make every pseudo-answer a paragraph; an
unusable reply is a counted fallback (the pseudo-answer: its cleaned text; a check: its default).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tandem.errors import ConfigError, ParseError
from tandem.index.encoder import Encoder
from tandem.llm.base import LLM, Message
from tandem.llm.jsonparse import parse_json
from tandem.methods.answers import answer_style, brief_answer_messages, clean_answer
from tandem.methods.base import (
    Role,
    Search,
    call_llm,
    call_structured,
    compact_json_examples,
    format_docs,
    mark_exchange,
    search_reranked,
)
from tandem.methods.metarag.settings import MetaRAGSettings
from tandem.methods.parts import Parts, read_with_reranker
from tandem.registry import METHODS
from tandem.rerank.base import Reranker
from tandem.types import Answer, Document, Question, Step, Trace

GENERATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"reason": {"type": "string", "maxLength": 400}, "answer": {"type": "string", "maxLength": 60}},
    "required": ["reason", "answer"],
}
GENERATE = Role("generate", GENERATE_SCHEMA, budget=1870, prompt_max_tokens=192)  # budget: the schema's worst
# case (1866), so the bounds stay 400 / 60 characters (at 256 they shrank to 50 / 7)
PSEUDO_SCHEMA: dict[str, Any] = {
    "type": "object", "properties": {"answer": {"type": "string", "maxLength": 60}}, "required": ["answer"]}
PSEUDO = Role("monitor", PSEUDO_SCHEMA, budget=256, prompt_max_tokens=32)
YES_NO = {"type": "string", "enum": ["yes", "no"]}
INTERNAL = Role("internal_knowledge", YES_NO, budget=8, prompt_max_tokens=4)
SUFFICIENT = Role("sufficiency", YES_NO, budget=8, prompt_max_tokens=4)
ENTAILED = Role("entailment", YES_NO, budget=8, prompt_max_tokens=4)

GENERATE_SYSTEM = compact_json_examples((
    "Answer the question from the documents. Reply with one JSON object on one line: "
    '{"reason": "<one or two sentences of reasoning from the documents>", "answer": "<the answer in a few words>"}'
))
YES_NO_SYSTEM = "Reply with one word: yes or no."
REWRITE_SYSTEM = (
    "Write one short search query (at most 64 characters) that would find the missing facts needed to answer "
    "the question. Reply with the query only."
)
SUGGEST_RETRIEVED = "The documents were not sufficient, so more were retrieved; use the new ones."
SUGGEST_KNOWLEDGE = "Where the documents are silent, you may use your own knowledge."
SUGGEST_REASON = "Your reason did not support your answer; reason again from the documents and answer consistently."
SUGGEST_CHECK = "Another reading of the documents gave a different answer; check your answer against the documents."


@dataclass(frozen=True)
class Generation:
    """The generator's reply."""

    reason: str
    answer: str


def parse_generation(text: str) -> Generation:
    """``{reason, answer}``; an empty answer is a ParseError."""
    value = parse_json(text, GENERATE_SCHEMA)
    answer = clean_answer(str(value["answer"]))
    if not answer:
        raise ParseError("empty answer", raw=text)
    return Generation(str(value["reason"]).strip(), answer)


def parse_pseudo(text: str) -> str:
    """The monitor's ``{answer}``; an empty answer is a ParseError."""
    answer = clean_answer(str(parse_json(text, PSEUDO_SCHEMA)["answer"]))
    if not answer:
        raise ParseError("empty answer", raw=text)
    return answer


def parse_yes_no(text: str) -> bool:
    """True for a reply starting with yes, False for no (quotes, case and punctuation ignored)."""
    words = text.strip().strip("\"'`").lower().split()
    word = words[0].strip(".,!:;\"'") if words else ""
    if word not in ("yes", "no"):
        raise ParseError(f"expected yes or no, got {text[:40]!r}", raw=text)
    return word == "yes"


class MetaRAG:
    """Retrieval-augmented generation with a metacognitive loop: monitor, critic, regenerate with a suggestion."""

    name = "metarag"

    def __init__(self, llm: LLM, search: Search, settings: MetaRAGSettings | None = None, *,
                 reranker: Reranker | None = None, encoder: Callable[[], Encoder] | None = None) -> None:
        """``encoder`` loads the monitor's sentence encoder on its first use (required unless ``monitor="off"``)."""
        s = settings or MetaRAGSettings()
        self.llm, self.search, self.reranker, self._load_encoder = llm, search, reranker, encoder
        self._encoder: Encoder | None = None
        self.max_iter, self.candidates, self.k = s.max_iter, s.candidates, s.k
        self.monitor, self.threshold, self.rewrite_chars = s.monitor, s.threshold, s.rewrite_chars
        self.temperature, self.send_schema = s.temperature, s.send_schema

    def _retrieve(self, trace: Trace, step: Step, query: str) -> list[Document]:
        hits, docs = search_reranked(self.search, self.reranker, query, self.k, self.candidates)
        step.queries.append(query)
        step.hits = [*step.hits, *hits]
        trace.read([d.id for d in docs])
        return docs

    def _generate(self, step: Step, question: str, docs: list[Document], suggestion: str) -> Generation:
        hint = f"\nSuggestion: {suggestion}" if suggestion else ""
        messages = [Message("system", GENERATE_SYSTEM),
                    Message("user", f"Documents:\n{format_docs(docs)}\nQuestion: {question}{hint}\nReply:")]
        gen, raw = call_structured(self.llm, step, GENERATE, messages, parse_generation, temperature=self.temperature,
                                   send_schema=self.send_schema, fallback="the reply's first line is the answer")
        return gen or Generation("", clean_answer(raw))

    def _ask(self, step: Step, role: Role, prompt: str, default: bool) -> bool:
        """One yes/no check; an unusable reply counts as a fallback to ``default``."""
        messages = [Message("system", YES_NO_SYSTEM), Message("user", prompt)]
        verdict, _ = call_structured(self.llm, step, role, messages, parse_yes_no, temperature=self.temperature,
                                     send_schema=self.send_schema, fallback="yes" if default else "no")
        return default if verdict is None else verdict

    def _similarity(self, a: str, b: str) -> float:
        if self._encoder is None:
            if self._load_encoder is None:
                raise ConfigError("MetaRAG's monitor needs an encoder (or set monitor=off)")
            self._encoder = self._load_encoder()
        va, vb = self._encoder.encode([a, b])
        return float(va @ vb)

    def _accepted(self, step: Step, question: str, docs: list[Document], gen: Generation) -> bool:
        messages = brief_answer_messages(question, docs, style=answer_style(self.llm))
        if self.send_schema:
            value, raw = call_structured(self.llm, step, PSEUDO, messages, parse_pseudo, temperature=self.temperature,
                                         fallback="the reply's cleaned text is the pseudo-answer")
            pseudo = value or clean_answer(raw)
        else:  # prompt-only: the brevity prompt's plain reply
            pseudo = clean_answer(call_llm(self.llm, step, "monitor", messages, max_tokens=PSEUDO.prompt_max_tokens,
                                           temperature=self.temperature))
        similarity = self._similarity(gen.answer, pseudo)
        step.notes.update(pseudo_answer=pseudo, similarity=round(similarity, 4))
        return similarity > self.threshold

    def _critic(self, trace: Trace, step: Step, question: str, docs: list[Document],
                gen: Generation) -> tuple[list[Document], str]:
        """Diagnose; returns the documents for the next generation and the suggestion."""
        shown = f"Documents:\n{format_docs(docs)}\nQuestion: {question}\n"
        internal = self._ask(step, INTERNAL, f"Question: {question}\nCan you answer it from your own knowledge, "
                                             "without documents?", default=False)
        sufficient = self._ask(step, SUFFICIENT, shown + "Do the documents contain enough to answer the question?",
                               default=True)
        step.notes.update(internal_knowledge=internal, sufficient=sufficient)
        tips = [SUGGEST_KNOWLEDGE] if internal else []
        if not sufficient:
            rewrite = call_llm(self.llm, step, "rewrite",
                               [Message("system", REWRITE_SYSTEM), Message("user", f"Question: {question}\nQuery:")],
                               max_tokens=32, temperature=self.temperature)
            query = clean_answer(rewrite)[: self.rewrite_chars]
            mark_exchange(step, "rewrite", "parsed" if query else "fallback",
                          f"empty rewrite: the question's first {self.rewrite_chars} characters as the query")
            query = query or question[: self.rewrite_chars]
            seen = {d.id for d in docs}
            docs = docs + [d for d in self._retrieve(trace, step, query) if d.id not in seen]
            return docs, " ".join([SUGGEST_RETRIEVED, *tips])
        entailed = self._ask(step, ENTAILED, f"Reason: {gen.reason}\nAnswer: {gen.answer}\nDoes the reason "
                                             "entail the answer?", default=True)
        step.notes["entailed"] = entailed
        return docs, " ".join([SUGGEST_CHECK if entailed else SUGGEST_REASON, *tips])

    def answer(self, question: Question) -> Answer:
        trace = Trace()
        docs = self._retrieve(trace, trace.add(Step("retrieve")), question.text)
        suggestion = ""
        gen = Generation("", "")
        for i in range(self.max_iter):
            step = trace.add(Step(f"iteration {i + 1}"))
            gen = self._generate(step, question.text, docs, suggestion)
            step.notes.update(reason=gen.reason, answer=gen.answer)
            if self.monitor == "off" or i + 1 == self.max_iter:
                step.notes["stop"] = "monitor off" if self.monitor == "off" else "iteration cap"
                break
            if self._accepted(step, question.text, docs, gen):
                step.notes["stop"] = "accepted"
                break
            docs, suggestion = self._critic(trace, step, question.text, docs, gen)
            step.notes["suggestion"] = suggestion
        return Answer(question.id, gen.answer, trace, self.name)


@METHODS.register("metarag", settings=MetaRAGSettings, needs=("index",))
def build(parts: Parts, s: MetaRAGSettings) -> MetaRAG:
    """MetaRAG over the index's search; its monitor compares answers with ``monitor_encoder``, else the index's
    encoder, else the embedded MiniLM, loaded on the monitor's first use."""
    from tandem.index.encoder import load_encoder
    from tandem.model_files import DEFAULT_ENCODER

    search, reranker = read_with_reranker(parts, "metarag", s)
    index = parts.index

    def encoder() -> Encoder:
        if s.monitor_encoder is None and index is not None and index.manifest.encoder is not None:
            return index.encoder
        return load_encoder(s.monitor_encoder or DEFAULT_ENCODER)

    return MetaRAG(parts.llm, search, s, reranker=reranker, encoder=encoder)
