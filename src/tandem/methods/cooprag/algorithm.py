"""CoopRAG (Ko, Seo, Kim, NeurIPS 2025; methods.md §1; prompts and parsers in ``prompts``)::

    S, R <- Unroll(Q)                       # JSON: sub-questions, triple chain with <UNCERTAIN>/<FILL>
                                            # (retried; fallback S = R = [] -> the query is Q alone)
    U    <- Q ‖ S ‖ R                       # unrolling-augmented query, one string
    D_n  <- dense top-n(U)                  # n = 100
    D_k  <- RaLa(U, D_n)[:k]                # layer-contrast rerank, k = 5
    R'   <- Complete(Q, S, R, D_k)          # fill the masks from the documents (retried; fallback R)
    A    <- Answer(Q, S, R', D_k)           # shortest span, explicit yes/no
                                            # one_call=True: R', A <- one call (paper Table 18)

Ablations: ``query`` picks U's parts (paper Table 16: "q", "q+s", "q+r", "q+s+r"); ``omega=False``
drops RaLa's gap weight (Table 5); ``reranker="none"`` keeps the first stage's top-k.
Deviations (docs/methods/cooprag.md): deterministic decoding by default (the authors sample at
0.7; retries then sample with ``retry_temperature``); masks are left out of U (``masks="drop"``)
unless the encoder was trained with them as tokens (``masks="keep"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tandem.errors import ConfigError
from tandem.llm.base import LLM, Message
from tandem.methods.answers import answer_style
from tandem.methods.base import (
    Search,
    call_llm,
    call_structured,
    mark_exchange,
    role_budgets,
)
from tandem.methods.cooprag import prompts as P
from tandem.methods.cooprag.settings import CoopRAGSettings
from tandem.methods.parts import Parts, dense_search
from tandem.registry import METHODS
from tandem.rerank.base import Reranker
from tandem.types import Answer, Document, Hit, Question, Step, Trace

T = TypeVar("T")
QUERY_PARTS = {"q": (), "q+s": ("s",), "q+r": ("r",), "q+s+r": ("s", "r")}
MASK_MODES = ("drop", "keep")


def render_query(question: str, unrolled: P.Unrolled, parts: str = "q+s+r", masks: str = "drop") -> str:
    """U = Q + " " + " ".join(S) + " " + ". ".join(" ".join(h, r, t)), as the authors build it
    (with the space their eval code forgets); ``parts`` picks the pieces, ``masks`` keeps or drops masks."""
    pieces = [question]
    if "s" in QUERY_PARTS[parts]:
        pieces += unrolled.sub_questions
    if "r" in QUERY_PARTS[parts] and unrolled.chain:
        keep = (lambda x: x) if masks == "keep" else P.strip_masks
        pieces.append(". ".join(" ".join(x for x in map(keep, t) if x) for t in unrolled.chain))
    return " ".join(p.strip() for p in pieces if p.strip())


class CoopRAG:
    """Question unrolling -> augmented retrieval -> RaLa -> chain completion -> answer."""

    name = "cooprag"

    def __init__(self, llm: LLM, search: Search, reranker: Reranker | None = None,
                 settings: CoopRAGSettings | None = None) -> None:
        s = settings or CoopRAGSettings()
        self.llm, self.search, self.reranker, self.candidates, self.k = llm, search, reranker, s.candidates, s.k
        self.query, self.masks, self.one_call, self.shared_context = s.query, s.masks, s.one_call, s.shared_context
        self.attempts = {"unroll": s.unroll_attempts, "complete": s.complete_attempts, "one_call": s.complete_attempts}
        self.temperature, self.retry_temperature = s.temperature, s.retry_temperature
        self.roles, self.max_tokens = role_budgets({r.name: r for r in (P.UNROLL, P.COMPLETE, P.ONE_CALL)},
                                                   {"answer": 32}, s.max_tokens, "CoopRAG")
        self.send_schema = s.send_schema

    def _ask(self, step: Step, role: str, messages: list[Message], parse: Callable[[str], T],
             fallback: str) -> T | None:
        """One structured exchange: the role's attempts, retries sampled at ``retry_temperature`` (seed =
        attempt) so a cache or greedy decoding cannot repeat them; None if no reply parsed."""
        value, _raw = call_structured(self.llm, step, self.roles[role], messages, parse, temperature=self.temperature,
                                      attempts=self.attempts[role], retry="resample",
                                      retry_temperature=self.retry_temperature, send_schema=self.send_schema,
                                      fallback=fallback)
        return value

    def unroll(self, question: str, step: Step) -> P.Unrolled:
        """Step (i); on repeated parse failure, no sub-questions and no chain (noted in the step)."""
        unrolled = self._ask(step, "unroll", P.unroll_messages(question), P.parse_unrolled,
                             "question only: no sub-questions and no chain")
        if unrolled is None:
            unrolled = P.Unrolled((), ())
        step.notes.update(sub_questions=list(unrolled.sub_questions), chain=[list(t) for t in unrolled.chain])
        return unrolled

    def retrieve(self, query: str, trace: Trace) -> tuple[list[Hit], list[Document]]:
        """Steps (ii)-(iii): dense top-n for U, reranked to top-k."""
        step = trace.add(Step("retrieve", queries=[query]))
        hits, _ = self.search(query, self.candidates if self.reranker is not None else self.k)
        step.hits = hits
        if self.reranker is not None:
            hits = self.reranker.rerank(query, hits, self.k)
            trace.add(Step("rerank", queries=[query], hits=hits, notes={"reranker": self.reranker.name}))
        docs = [self.search.store.get(h.doc_id) for h in hits[: self.k]]
        trace.read([d.id for d in docs])
        return hits[: self.k], docs

    def complete_and_answer(self, question: str, unrolled: P.Unrolled, docs: list[Document],
                            trace: Trace) -> str:
        """Steps (iv)-(v) as two calls, or one (``one_call``); the answer falls back to the chain's last tail."""
        subs, chain = unrolled.sub_questions, unrolled.chain
        if self.one_call:
            step = trace.add(Step("complete+answer"))
            both = self._ask(step, "one_call", P.one_call_messages(question, subs, chain, docs), P.parse_one_call,
                             "the masked chain, the answer read from the raw reply")
            completed, text = both if both is not None else (chain, P.parse_answer(step.llm_calls[-1].output))
            step.notes["chain"] = [list(t) for t in completed]
        else:
            step = trace.add(Step("complete"))
            completed = chain
            if not chain:
                step.notes["skipped"] = "no chain to complete"
            else:
                completed = self._ask(step, "complete", P.complete_messages(question, subs, chain, docs, self.shared_context,
                                                                            answer_style(self.llm)),
                                      P.parse_completed, "the masked chain") or chain
            step.notes["chain"] = [list(t) for t in completed]
            step = trace.add(Step("answer"))
            text = P.parse_answer(call_llm(self.llm, step, "answer",
                                           P.answer_messages(question, subs, completed, docs, self.shared_context,
                                                             answer_style(self.llm)),
                                           max_tokens=self.max_tokens["answer"], temperature=self.temperature))
        role = "one_call" if self.one_call else "answer"
        if not text:
            text = P.chain_answer(completed)
            mark_exchange(step, role, "fallback", "empty answer, the completed chain's last tail")
        elif not self.one_call:
            mark_exchange(step, role, "parsed")
        return text

    def answer(self, question: Question) -> Answer:
        trace = Trace()
        unrolled = self.unroll(question.text, trace.add(Step("unroll")))
        _, docs = self.retrieve(render_query(question.text, unrolled, self.query, self.masks), trace)
        return Answer(question.id, self.complete_and_answer(question.text, unrolled, docs, trace), trace, self.name)


@METHODS.register("cooprag", settings=CoopRAGSettings, needs=("index",))
def build(parts: Parts, s: CoopRAGSettings) -> CoopRAG:
    """RaLa from the index's stored features (``--extras rala``) or computed at query time; the first stage
    is the index's dense part (sharing RaLa's forward pass) unless ``first_stage="index"`` or the search is
    another retriever than the index's own kind (``--retriever graph``, bm25 on a hybrid index: honoured)."""
    from tandem.rerank.rala import SharedDenseRetriever, open_rala

    search = parts.need_search("cooprag")
    index = parts.index
    rala = None
    if s.reranker == "rala":
        if index is None:
            raise ConfigError("RaLa needs the index behind the retriever: build the method with its index")
        rala = open_rala(index, encoder=s.encoder, layers=tuple(s.layers), cls=s.cls, omega=s.omega,
                         variant=s.variant, fuse=s.fuse)
    if s.first_stage == "dense" and (index is None or search.retriever.name in (index.kind, "dense")):
        if index is None or not index.has("dense"):
            raise ConfigError("CoopRAG's first stage is dense: give a dense or hybrid index, or set first_stage=index")
        if rala is not None and SharedDenseRetriever.compatible(index, rala.encoder):
            search = Search(SharedDenseRetriever(index, rala), search.store)
        else:
            search = dense_search(parts, search)
    return CoopRAG(parts.llm, search, rala, s)
