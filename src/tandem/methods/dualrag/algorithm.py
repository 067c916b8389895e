"""DualRAG (Cheng et al., ACL 2025): Reasoning-augmented Querying + progressive Knowledge Aggregation
(methods.md §3; prompts in ``prompts``, readers of the replies in ``parse``)::

    outline <- {}                      # entity -> summaries (append-only) + supports (doc ids read)
    thoughts <- []
    for step in 1..max_iter:
        thought, need_retrieve <- Reasoner(outline, question, thoughts)
        if not need_retrieve and outline = {} and knowledge_first: need_retrieve <- true  (the guess is dropped)
        else: thoughts += thought
        if not need_retrieve: break
        plan <- EntityIdentifier(outline, question, thoughts, known=entities(outline) - {else})
        if outline = {} and question_query: plan[else] += question
        for entity, keywords in plan:
            pool <- union by doc id of retrieve(keyword, candidates=50) for each keyword
            docs <- rerank(entity name, pool)[:k]         (k: 10 as the paper; cross-encoder: logits <= min_score dropped)
            if entity = else and question in keywords:   (question_docs: what NativeRAG reads comes first)
                docs <- (retrieve(question)[:question_docs] + docs)[:k]
            unread <- docs not in outline[entity].supports
            summary <- Summarizer(question, thoughts, entity, keywords, unread)
            summary <- summary less its sentences naming what neither unread nor the question names  (grounded_notes)
            outline[entity] += summary, unless summary is None/empty; an entity left empty is removed
                (its supports stay recorded: its docs are not read again; forget_dropped: the authors' code)
        if nothing unread this step and thought = previous thought and stop_when_stuck: break
    best <- (retrieve(question)[:question_docs] + rerank(question, docs read))   (what NativeRAG reads first)
    knowledge <- outline + best[:answer_docs]; if outline = {}: best[:empty_outline_docs] (empty_outline = documents)
    return Answer(knowledge, question, thoughts if answer_reasoning)

The entities of one step have outline entries of their own, so their Summarizer calls are independent:
on an LLM that batches concurrent requests (the embedded engine, a server) they are sent at once
(``parallel_summaries``); the calls, their order in the trace and the outline are those of the loop above.

Ablations (paper Table 3): ``use_reasoner=False`` -> one IRCoT-style sentence per step, retrieval
until the answer marker; ``use_entity_identifier=False`` -> the thought is the only query, filed
under "else"; ``use_outline=False`` -> raw documents are stored instead of summaries; ``reranker=None``
-> the union is kept in retrieval-score order, top-k.

Structured output: the Reasoner, Entity Identifier and Summarizer reply in JSON under bounded
schemas (``prompts.STRUCTURED_ROLES``), decoded under the schema where the backend can
(``send_schema=False`` sends no schema: prompt-only). Fallbacks (never crash on model output, each
counted in the run's protocol health and noted in the step): one repair round; then the Reasoner
takes the raw text as its thought (need_retrieve = not the last step), the Entity Identifier sends
the thought as one "else" query, and the Summarizer's raw text becomes the notes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tandem.errors import ConfigError
from tandem.llm.base import LLM, LLMRequest, Message, batches
from tandem.methods.answers import answer_style, clean_answer, extract_answer, first_sentence
from tandem.methods.base import (
    Role,
    Search,
    at_once,
    call_llm,
    call_structured,
    mark_exchange,
    role_budgets,
)
from tandem.methods.dualrag import parse as R
from tandem.methods.dualrag import prompts as P
from tandem.methods.dualrag.settings import DualRAGSettings
from tandem.methods.parts import Parts, dense_search, load_role_llms, read_with_reranker
from tandem.registry import METHODS
from tandem.rerank.base import Reranker
from tandem.types import Answer, Document, Hit, Question, Step, Trace

T = TypeVar("T")
MAX_TOKENS = {"answer": 32, P.THOUGHT_ROLE: 64, "answer:complete": 256}


@dataclass
class Knowledge:
    """What the outline knows about one entity: summaries (append-only) and the ids of docs read."""

    summaries: list[str] = field(default_factory=list)
    supports: list[str] = field(default_factory=list)


@dataclass
class Outline:
    """The Knowledge Outline: entity -> Knowledge, in first-seen order."""

    entries: dict[str, Knowledge] = field(default_factory=dict)
    #: doc ids read by entities removed for want of content, by casefolded name (kept unless ``forget_dropped``)
    dropped: dict[str, list[str]] = field(default_factory=dict)
    forget_dropped: bool = False

    def link(self, name: str) -> str:
        """The outline's spelling of ``name`` when it already holds that entity (case-insensitive)."""
        for known in self.entries:
            if known.casefold() == name.casefold():
                return known
        return name

    def known_entities(self) -> list[str]:
        return [e for e in self.entries if e not in (P.ELSE_ENTITY, P.RAW_DOCS_ENTITY)]

    def unread(self, entity: str, docs: Sequence[Document]) -> list[Document]:
        """The docs ``entity`` has not read (a removed entity's reads count, unless ``forget_dropped``)."""
        seen = set(self.entries[entity].supports) if entity in self.entries else set()
        seen.update(self.dropped.get(entity.casefold(), ()))
        return [d for d in docs if d.id not in seen]

    def aggregate(self, entity: str, content: str, doc_ids: Sequence[str]) -> bool:
        """Record ``doc_ids`` as read and append ``content`` unless it is a None summary (exact rule);
        an entity left without content is removed. Returns whether the content was kept."""
        entry = self.entries.setdefault(entity, Knowledge())
        entry.supports += [d for d in doc_ids if d not in entry.supports]
        keep = not R.is_none_summary(content)
        if keep:
            entry.summaries.append(content.strip())
        elif not entry.summaries:
            del self.entries[entity]
            if not self.forget_dropped:
                self.dropped.setdefault(entity.casefold(), []).extend(entry.supports)
        return keep

    def snapshot(self) -> dict[str, list[str]]:
        return {e: list(k.summaries) for e, k in self.entries.items()}

    def render(self) -> str:
        return P.render_outline(self.snapshot())


def union_by_id(runs: Sequence[Sequence[Hit]]) -> list[Hit]:
    """One list of the hits of several queries: each doc once with its best score, best first."""
    best: dict[str, float] = {}
    for hits in runs:
        for h in hits:
            best[h.doc_id] = max(h.score, best.get(h.doc_id, float("-inf")))
    order = sorted(best.items(), key=lambda kv: -kv[1])
    return [Hit(d, s, i, "union") for i, (d, s) in enumerate(order, 1)]


def lead(first: Sequence[Hit], ranked: Sequence[Hit], n: int) -> list[Hit]:
    """``first`` (the question's own hits), then ``ranked`` without them: ``n`` hits at most."""
    pinned = {h.doc_id for h in first}
    return [*first, *(h for h in ranked if h.doc_id not in pinned)][:n]


def _check_roles(names: Mapping[str, Any]) -> None:
    unknown = sorted(set(names) - set(P.ROLES))
    if unknown:
        raise ConfigError(f"unknown DualRAG role(s) {unknown}; roles: {sorted(P.ROLES)}")


class DualRAG:
    """Reasoner + Entity Identifier query; Knowledge Summarizer + Outline aggregate; Answer at the end."""

    name = "dualrag"

    def __init__(self, llm: LLM, search: Search, settings: DualRAGSettings | None = None, *,
                 reranker: Reranker | None = None, role_llms: Mapping[str, LLM] | None = None,
                 question_search: Search | None = None) -> None:
        s = settings or DualRAGSettings()
        _check_roles(role_llms or {})
        self.llms = {role: (role_llms or {}).get(role, llm) for role in P.ROLES}
        self.llms[P.THOUGHT_ROLE] = self.llms["reasoner"]
        self.search, self.reranker = search, reranker
        self.max_iter, self.candidates, self.k = s.max_iter, s.candidates, s.k
        self.use_reasoner, self.use_entity_identifier, self.use_outline = s.use_reasoner, s.use_entity_identifier, s.use_outline
        self.knowledge_first, self.stop_when_stuck = s.knowledge_first, s.stop_when_stuck
        self.question_query, self.question_docs = s.question_query, s.question_docs
        self.question_search = question_search or search  # the run's own retriever: NativeRAG's first stage
        self.answer_style, self.max_entities, self.temperature = s.answer_style, s.max_entities, s.temperature
        self.send_schema, self.parallel_summaries = s.send_schema, s.parallel_summaries
        self.empty_outline, self.empty_outline_docs = s.empty_outline, s.empty_outline_docs
        self.answer_docs, self.answer_reasoning = s.answer_docs, s.answer_reasoning
        self.forget_dropped, self.grounded_notes = s.forget_dropped, s.grounded_notes
        roles = {**P.STRUCTURED_ROLES, P.ENTITY_IDENTIFIER.name: P.entity_role(s.max_entities)}
        self.roles, self.max_tokens = role_budgets(roles, MAX_TOKENS, s.max_tokens, "DualRAG")

    # -- the loop ---------------------------------------------------------------------------------

    def answer(self, question: Question) -> Answer:
        trace, outline, thoughts = Trace(), Outline(forget_dropped=self.forget_dropped), list[str]()
        asked: list[Hit] = []  # the question's own hits (question_docs), once searched
        for i in range(1, self.max_iter + 1):
            step = trace.add(Step(f"iteration {i}"))
            thought, need_retrieve = self._reason(step, outline, question.text, thoughts, last=i == self.max_iter)
            step.notes.update(thought=thought, need_retrieve=need_retrieve)
            if not need_retrieve and self.knowledge_first and not outline.entries and i < self.max_iter:
                step.notes["overruled"] = "no knowledge read yet: the guess is dropped and retrieval goes on"
                need_retrieve = True
            else:
                thoughts.append(thought)
            if not need_retrieve:
                break
            plan = self._identify(step, outline, question.text, thoughts)
            first: list[Hit] = []
            if self.question_query and not outline.entries:  # nothing read yet: the question itself is searched too
                plan = self._with_question(plan, question.text)
                first = asked = (self.question_search.retriever.search(question.text, self.question_docs)
                                 if self.question_docs else [])
            step.notes.update(entities=dict(plan), hits={}, summaries={})
            read = self._aggregate(trace, step, outline, question.text, thoughts, plan, first)
            step.notes["outline"] = outline.render()
            if self.stop_when_stuck and not read and thoughts[-2:-1] == thoughts[-1:]:
                step.notes["stopped"] = "stuck: the thought repeats and no new document was read"
                break
        final = trace.add(Step("answer", notes={"outline": outline.render()}))
        style = self.answer_style
        text = call_llm(self.llms["answer"], final, "answer",
                        P.answer_messages(self._knowledge(trace, final, outline, question.text, asked), question.text,
                                          thoughts if self.answer_reasoning else None, style, answer_style(self.llms["answer"])),
                        max_tokens=self.max_tokens["answer" if style == "short" else "answer:complete"],
                        temperature=self.temperature)
        return Answer(question.id, clean_answer(text) if style == "short" else text.strip(), trace, self.name)

    def _knowledge(self, trace: Trace, final: Step, outline: Outline, question: str, first: Sequence[Hit]) -> str:
        """What the answer reads: the outline, then the best ``answer_docs`` passages read; where the Summarizer
        kept nothing (``empty_outline="documents"``), the best ``empty_outline_docs`` passages alone (noted).
        Best: the question's own hits that were read (``first``, what NativeRAG reads) lead, then the rest of
        what was read ranked for the question (the reranker runs only where ``first`` leaves room)."""
        n = (self.answer_docs if self.use_outline else 0) if outline.entries else (  # w/o KO: it holds them raw
            self.empty_outline_docs if self.empty_outline == "documents" else 0)
        hits = union_by_id([step.hits for step in trace.steps])
        read = {h.doc_id for h in hits}
        first = [h for h in first if h.doc_id in read][:n]
        leading = {h.doc_id for h in first}
        rest = [h for h in hits if h.doc_id not in leading]
        need = n - len(first)
        ranked = ((self.reranker.rerank(question, rest, need) if self.reranker is not None else rest[:need])
                  if need > 0 and rest else [])
        best = lead(first, ranked, n)
        if not best:
            return outline.render()
        final.hits = best
        passages = "\n\n".join(P.render_doc(self.search.store.get(h.doc_id)) for h in best)
        if outline.entries:
            final.notes["knowledge"] = f"the outline, then the {len(best)} best passages read (answer_docs)"
            return outline.render() + "\n\n" + passages
        final.notes["knowledge"] = (f"the outline is empty: the answer reads the {len(best)} passages read that "
                                    "best match the question (empty_outline=documents)")
        return passages

    # -- RaQ: Reasoner --------------------------------------------------------------------------

    def _reason(self, step: Step, outline: Outline, question: str, thoughts: list[str], last: bool) -> tuple[str, bool]:
        if not self.use_reasoner:  # IRCoT-style: one sentence, retrieve until the answer marker
            raw = call_llm(self.llms[P.THOUGHT_ROLE], step, P.THOUGHT_ROLE,
                           P.thought_messages(outline.render(), question, thoughts),
                           max_tokens=self.max_tokens[P.THOUGHT_ROLE], temperature=self.temperature, stop=("\n",))
            thought = first_sentence(raw)
            mark_exchange(step, P.THOUGHT_ROLE, "parsed" if thought else "fallback", "empty thought: the question")
            thought = thought or question
            return thought, extract_answer(thought) is None
        parsed, raw = self._json(step, P.REASONER, P.reasoner_messages(outline.render(), question, thoughts),
                                 R.parse_reasoner, "raw text as the thought")
        if parsed is not None:
            return parsed
        return (raw.strip()[:500] or question), not last

    # -- RaQ: Entity Identifier -----------------------------------------------------------------

    def _identify(self, step: Step, outline: Outline, question: str, thoughts: list[str]) -> list[tuple[str, list[str]]]:
        fallback = [(P.ELSE_ENTITY, [(thoughts[-1] if thoughts else "") or question])]
        if not self.use_entity_identifier:
            return fallback
        messages = P.entity_messages(outline.render(), question, thoughts, outline.known_entities())
        plan, _raw = self._json(step, P.ENTITY_IDENTIFIER, messages, R.parse_entities, "the thought as one 'else' query")
        if plan is None:
            return fallback
        linked: dict[str, list[str]] = {}
        for entity, keywords in plan[: self.max_entities]:
            bucket = linked.setdefault(outline.link(entity), [])
            bucket += [k for k in keywords if k not in bucket]
        return list(linked.items())

    @staticmethod
    def _with_question(plan: list[tuple[str, list[str]]], question: str) -> list[tuple[str, list[str]]]:
        """The plan with the question as one more "else" query (once)."""
        merged = dict(plan)
        keywords = merged.setdefault(P.ELSE_ENTITY, [])
        if question not in keywords:
            keywords.append(question)
        return list(merged.items())

    # -- RaQ retrieval + pKA for one entity -----------------------------------------------------

    def _retrieve(self, entity: str, keywords: list[str], first: Sequence[Hit] = ()) -> list[Hit]:
        """Top-``candidates`` per keyword, union by id, rerank with the entity name, keep ``k``; ``first`` (the
        question's own hits) lead the list of "else" whatever the reranker makes of them."""
        first = first if entity == P.ELSE_ENTITY else ()
        pool = union_by_id(self.search.retriever.search_batch(keywords, self.candidates))
        if self.reranker is None:
            ranked = pool[: self.k]
        else:
            query = "; ".join(keywords) if entity == P.ELSE_ENTITY else entity  # "else" names nothing to rank by
            ranked = self.reranker.rerank(query, pool, self.k)
        return lead(first, ranked, self.k) if first else ranked

    def _aggregate(self, trace: Trace, step: Step, outline: Outline, question: str, thoughts: list[str],
                   plan: list[tuple[str, list[str]]], first: Sequence[Hit] = ()) -> bool:
        """pKA for each entity of the plan, in its order: retrieve, keep the docs its outline entry has not
        read, summarize them, add the notes to the outline. Each entity has an entry of its own, so its
        Summarizer call depends on no other entity's: where the Summarizer's LLM batches concurrent requests
        they are sent at once (``parallel_summaries``) and recorded in the plan's order: given the same replies,
        a step that succeeds has the trace and outline of the calls sent one by one. ``first``: the question's own
        hits, read first by "else". True when a document was read."""
        read = False
        if not self.use_outline:  # the raw documents, unstructured, in one bucket: each entity reads after the last
            for entity, keywords in plan:
                unread = self._read(trace, step, outline, P.RAW_DOCS_ENTITY, entity, keywords, first)
                if unread:
                    read = True
                    self._keep(step, outline, P.RAW_DOCS_ENTITY, entity, "\n\n".join(P.render_doc(d) for d in unread),
                               unread)
            return read
        todo = [(entity, keywords, unread) for entity, keywords in plan
                if (unread := self._read(trace, step, outline, entity, entity, keywords, first))]
        for (entity, _keywords, unread), content in zip(todo, self._summarize(step, question, thoughts, todo), strict=True):
            self._keep(step, outline, entity, entity, content, unread)
        return bool(todo)

    def _read(self, trace: Trace, step: Step, outline: Outline, bucket: str, entity: str,
              keywords: list[str], first: Sequence[Hit] = ()) -> list[Document]:
        """Retrieve for ``entity`` (recorded in the step) and return the docs ``bucket`` has not read yet."""
        hits = self._retrieve(entity, keywords, first)
        step.queries += keywords
        step.hits += hits
        step.notes["hits"][entity] = [h.doc_id for h in hits]
        unread = outline.unread(bucket, [self.search.store.get(h.doc_id) for h in hits])
        trace.read([d.id for d in unread])
        return unread

    def _summarize(self, step: Step, question: str, thoughts: list[str],
                   todo: list[tuple[str, list[str], list[Document]]]) -> list[str]:
        """The Summarizer's notes for each (entity, keywords, unread docs); its raw text where it falls back."""
        def one(into: Step, entity: str, keywords: list[str], docs: list[Document]) -> str:
            notes, raw = self._json(into, P.SUMMARIZER, P.summarizer_messages(question, thoughts, entity, keywords, docs),
                                    R.parse_summary, "raw text as the notes")
            notes = notes if notes is not None else raw.strip()
            if self.grounded_notes:  # a sentence naming what no document read and not the question names is dropped
                notes, dropped = R.ground_notes(notes, [question, *(P.render_doc(d) for d in docs)])
                if dropped:
                    into.notes.setdefault("ungrounded", []).extend(dropped)
            return notes

        if len(todo) < 2 or not (self.parallel_summaries and batches(self.llms[P.SUMMARIZER.name])):
            return [one(step, *job) for job in todo]
        scratch = [Step(step.name) for _ in todo]  # each call's records, merged below in the plan's order
        contents = at_once([functools.partial(one, into, *job) for into, job in zip(scratch, todo, strict=True)])
        for part in scratch:
            step.llm_calls += part.llm_calls
            for key in ("parse_errors", "fallbacks", "ungrounded"):
                if key in part.notes:
                    step.notes.setdefault(key, []).extend(part.notes[key])
        return contents

    def _keep(self, step: Step, outline: Outline, bucket: str, entity: str, content: str,
              docs: list[Document]) -> None:
        kept = outline.aggregate(bucket, content, [d.id for d in docs])
        step.notes["summaries"][entity] = content if kept else None

    # -- ahead of the first question ------------------------------------------------------------

    def warm_requests(self) -> list[tuple[LLM, LLMRequest]]:
        """Each role's prompt on placeholders (its instructions and demonstrations come first, the same in
        every call), with its schema, to its LLM (:func:`tandem.methods.base.warm_up`)."""
        none, blank = "None", "?"
        structured = {P.REASONER.name: P.reasoner_messages(none, blank, []) if self.use_reasoner else None,
                      P.ENTITY_IDENTIFIER.name: P.entity_messages(none, blank, [], []) if self.use_entity_identifier else None,
                      P.SUMMARIZER.name: P.summarizer_messages(blank, [], blank, [], []) if self.use_outline else None}
        text = {"answer": P.answer_messages(none, blank, [] if self.answer_reasoning else None, self.answer_style,
                                            answer_style(self.llms["answer"])),
                P.THOUGHT_ROLE: None if self.use_reasoner else P.thought_messages(none, blank, [])}
        return ([(self.llms[name], LLMRequest(tuple(messages), max_tokens=1, stop=P.JSON_STOP,
                                              json_schema=self.roles[name].bounded if self.send_schema else None))
                 for name, messages in structured.items() if messages]
                + [(self.llms[name], LLMRequest(tuple(messages), max_tokens=1)) for name, messages in text.items() if messages])

    # -- JSON roles -----------------------------------------------------------------------------

    def _json(self, step: Step, role: Role, messages: list[Message], parse: Callable[[str], T],
              fallback: str) -> tuple[T | None, str]:
        """One structured exchange of ``role`` (one repair round); (value or None, the first raw reply)."""
        return call_structured(self.llms[role.name], step, self.roles[role.name], messages, parse, temperature=self.temperature,
                               stop=P.JSON_STOP, send_schema=self.send_schema, fallback=fallback)


@METHODS.register("dualrag", settings=DualRAGSettings, needs=("index",), default=True)  # the method where none is named
def build(parts: Parts, s: DualRAGSettings) -> DualRAG:
    """DualRAG over the index's search (its dense part for keywords unless ``keyword_retriever="index"``),
    with the settings' reranker and role LLMs."""
    search = native = parts.need_search("dualrag")
    if s.keyword_retriever == "dense" and s.first_stage == "index":
        search = dense_search(parts, search)
    search, reranker = read_with_reranker(parts, "dualrag", s, search, same_query=False)  # keywords retrieve,
    return DualRAG(parts.llm, search, s, reranker=reranker,                               # the entity reranks
                   role_llms=load_role_llms(parts.llm, s.role_llms), question_search=native)
