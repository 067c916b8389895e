"""CoopRAG (Ko, Seo, Kim, NeurIPS 2025; methods.md §1; prompts and parsers in ``cooprag_prompts``)::

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

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from tandem.errors import ConfigError
from tandem.llm.types import LLM, Message
from tandem.methods import cooprag_prompts as P
from tandem.methods.base import Search, call_llm, call_structured, role_budgets
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

    def __init__(self, llm: LLM, search: Search, reranker: Reranker | None = None, *, n: int = 100, k: int = 5,
                 query: str = "q+s+r", masks: str = "drop", one_call: bool = False, unroll_attempts: int = 3,
                 complete_attempts: int = 3, temperature: float = 0.0, retry_temperature: float = 0.7,
                 max_tokens: Mapping[str, int] | None = None, send_schema: bool = True) -> None:
        if query not in QUERY_PARTS:
            raise ConfigError(f"unknown CoopRAG query {query!r}; choose one of {sorted(QUERY_PARTS)}")
        if masks not in MASK_MODES:
            raise ConfigError(f"unknown CoopRAG masks {masks!r}; choose one of {sorted(MASK_MODES)}")
        if unroll_attempts < 1 or complete_attempts < 1 or not 0 < k <= n:
            raise ConfigError("CoopRAG needs attempts >= 1 and 0 < k <= n")
        self.llm, self.search, self.reranker, self.n, self.k = llm, search, reranker, n, k
        self.query, self.masks, self.one_call = query, masks, one_call
        self.attempts = {"unroll": unroll_attempts, "complete": complete_attempts, "one_call": complete_attempts}
        self.temperature, self.retry_temperature = temperature, retry_temperature
        self.roles, self.max_tokens = role_budgets({r.name: r for r in (P.UNROLL, P.COMPLETE, P.ONE_CALL)},
                                                   {"answer": 32}, max_tokens or {}, "CoopRAG")
        self.send_schema = send_schema

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
        hits, _ = self.search(query, self.n if self.reranker is not None else self.k)
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
                completed = self._ask(step, "complete", P.complete_messages(question, subs, chain, docs),
                                      P.parse_completed, "the masked chain") or chain
            step.notes["chain"] = [list(t) for t in completed]
            step = trace.add(Step("answer"))
            text = P.parse_answer(call_llm(self.llm, step, "answer", P.answer_messages(question, subs, completed, docs),
                                           max_tokens=self.max_tokens["answer"], temperature=self.temperature))
        if not text:
            text = P.chain_answer(completed)
            step.notes.setdefault("fallbacks", []).append("answer: empty answer, the completed chain's last tail")
        return text

    def answer(self, question: Question) -> Answer:
        trace = Trace()
        unrolled = self.unroll(question.text, trace.add(Step("unroll")))
        _, docs = self.retrieve(render_query(question.text, unrolled, self.query, self.masks), trace)
        return Answer(question.id, self.complete_and_answer(question.text, unrolled, docs, trace), trace, self.name)


RERANKERS = ("rala", "none")
FIRST_STAGES = ("dense", "index")


def from_settings(llm: LLM, search: Search, *, reranker: str = "rala", first_stage: str = "dense",
                  encoder: str | None = None, layers: Sequence[int] | None = None, cls: str | None = None,
                  omega: bool = True, variant: str = "eq4", fuse: str | None = None, **hyper: Any) -> CoopRAG:
    """CoopRAG over the index behind ``search``: RaLa from its stored features (``--extras rala``) or
    computed at query time; the first stage is the index's dense part (sharing RaLa's forward pass)
    unless ``first_stage="index"`` (the index's own retriever, e.g. hybrid)."""
    from tandem.rerank.rala import (
        DEFAULT_CLS,
        DEFAULT_FUSE,
        DEFAULT_LAYERS,
        SharedDenseRetriever,
        open_rala,
    )
    from tandem.retrieve.dense import DenseRetriever

    if reranker not in RERANKERS or first_stage not in FIRST_STAGES:
        raise ConfigError(f"CoopRAG reranker must be one of {sorted(RERANKERS)} and first_stage one of {sorted(FIRST_STAGES)}")
    retriever = search.retriever
    found = [getattr(r, "index", None) for r in [retriever, *getattr(retriever, "retrievers", [])]]
    index = next((i for i in found if i is not None and i.has("dense")), None)
    rala = None
    if reranker == "rala":
        owner = index or next((i for i in found if i is not None), None)
        if owner is None:
            raise ConfigError("RaLa needs the index behind the retriever (open it with open_retriever)")
        rala = open_rala(owner, encoder=encoder, layers=tuple(layers or DEFAULT_LAYERS), cls=cls or DEFAULT_CLS,
                         omega=omega, variant=variant, fuse=fuse or DEFAULT_FUSE)
    if first_stage == "dense":
        if index is None:
            raise ConfigError("CoopRAG's first stage is dense: give a dense or hybrid index, or set first_stage=index")
        share = rala is not None and SharedDenseRetriever.compatible(index, rala.encoder)
        retriever = SharedDenseRetriever(index, rala) if share and rala is not None else DenseRetriever(index)
    return CoopRAG(llm, Search(retriever, search.store), rala, **hyper)
