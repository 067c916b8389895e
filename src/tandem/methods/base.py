"""What every method shares: the Method protocol, a search helper over an index, LLM calls that
land in the trace, and the brevity answer prompt the baselines use."""

from __future__ import annotations

import contextvars
import functools
import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Protocol, TypeVar, runtime_checkable

from tandem.errors import ConfigError, ParseError
from tandem.index.store import DocStore
from tandem.llm.base import (
    LLM,
    LLMRequest,
    LLMResponse,
    Message,
    caches_prefixes,
    constrains_json,
    context_window,
    fit_to_context,
)
from tandem.llm.jsonparse import validate
from tandem.llm.structured import bound_schema
from tandem.rerank.base import Reranker
from tandem.retrieve.base import Retriever
from tandem.types import OUTCOMES, Answer, Document, Hit, LLMCall, Question, Step, current_observer

T = TypeVar("T")


@runtime_checkable
class Method(Protocol):
    """A QA method: hyper-parameters in the constructor, one question at a time."""

    name: str

    def answer(self, question: Question) -> Answer:
        """Answer one question; the Answer's trace records every query, hit and LLM call."""
        ...


@runtime_checkable
class WarmsUp(Protocol):
    """A method that can say what every prompt of each of its roles begins with (:func:`warm_up`)."""

    def warm_requests(self) -> list[tuple[LLM, LLMRequest]]:
        """One request per role, to the role's LLM: a prompt that begins as every prompt of the role does (its
        instructions and demonstrations, then placeholders), with the role's schema and ``max_tokens=1``."""
        ...


def warm_up(method: object) -> tuple[int, int]:
    """Compute ahead of the first question what every prompt of ``method``'s roles begins with, on the LLMs
    that keep it (:func:`tandem.llm.base.caches_prefixes`; the grammar of each role's schema is compiled on
    the way): a server's first question then pays only for its own part. The requests go at once; returns
    (requests sent, their prompt tokens). A method or LLM that cannot gain sends nothing."""
    if not isinstance(method, WarmsUp):
        return 0, 0
    pairs = [(llm, req) for llm, req in method.warm_requests() if caches_prefixes(llm)]

    def send(llm: LLM, req: LLMRequest) -> int:
        observer = current_observer()
        if observer is not None:
            observer.check()  # stopped before it was sent
        return llm.complete(req).prompt_tokens

    return len(pairs), sum(at_once([functools.partial(send, llm, req) for llm, req in pairs]))


def at_once(calls: Sequence[Callable[[], T]]) -> list[T]:
    """Run ``calls`` concurrently and return their results in order; once all have ended, the first failure
    in order is raised. Each runs on a thread of its own in a copy of this context, so the question's
    :class:`tandem.types.TraceObserver` reaches it (a cancelled question stops it); the threads are daemons,
    so a Ctrl-C does not wait for their LLM calls to end."""
    if len(calls) < 2:
        return [call() for call in calls]
    results: list[Any] = [None] * len(calls)
    failures: list[BaseException | None] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread below
            failures[i] = exc

    threads = [threading.Thread(target=contextvars.copy_context().run, args=(run, i), daemon=True,
                                name=f"tandem-at-once-{i}") for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for failure in failures:
        if failure is not None:
            raise failure
    return results


@dataclass
class Search:
    """A retriever plus the store that resolves its hits to documents."""

    retriever: Retriever
    store: DocStore

    def __call__(self, query: str, k: int) -> tuple[list[Hit], list[Document]]:
        hits = self.retriever.search(query, k)
        return hits, [self.store.get(h.doc_id) for h in hits]


def search_reranked(search: Search, reranker: Reranker | None, query: str, k: int,
                    candidates: int) -> tuple[list[Hit], list[Document]]:
    """The top ``candidates`` for ``query`` reranked to ``k`` by ``reranker``, or the top ``k`` without one."""
    hits, docs = search(query, candidates if reranker is not None else k)
    if reranker is None:
        return hits, docs
    hits = reranker.rerank(query, hits, k)
    return hits, [search.store.get(h.doc_id) for h in hits]


def record_call(llm: LLM, step: Step, role: str, req: LLMRequest, *,
                send: Callable[[LLMRequest], LLMResponse] | None = None) -> LLMResponse:
    """Complete ``req`` and append the call to ``step`` (the one place method LLM calls are recorded).
    A prompt longer than the LLM's context window is cut first (:func:`fit_to_context`); the call
    records how many characters went. ``send`` answers the request instead of ``llm.complete`` (a
    method that builds the model's input itself, e.g. R²AG's prompt embeddings); its prompt is not cut."""
    observer = current_observer()
    if observer is not None:
        observer.check()  # a cancelled request stops before its next LLM call
    cut = 0
    if send is None:
        req, cut = fit_to_context(req, context_window(llm))
        send = llm.complete
    resp = send(req)
    step.llm_calls.append(LLMCall(
        role=role, messages=tuple(m.to_dict() for m in req.messages), output=resp.text,
        prompt_tokens=resp.prompt_tokens, completion_tokens=resp.completion_tokens,
        latency_s=resp.latency_s, cached=getattr(resp, "cached", False),
        structured=req.json_schema is not None, constrained=getattr(resp, "constrained", False), cut_chars=cut,
        reused_tokens=getattr(resp, "reused_tokens", 0),
    ))
    return resp


def call_llm(llm: LLM, step: Step, role: str, messages: Sequence[Message], **request: object) -> str:
    """Complete ``messages`` and record the call in ``step``; returns the stripped output text."""
    req = LLMRequest(messages=tuple(messages), **request)  # type: ignore[arg-type]
    return record_call(llm, step, role, req).text.strip()


@dataclass(frozen=True)
class Role:
    """A structured role's output contract: its JSON schema and token budgets.

    ``budget`` bounds the schema (:func:`tandem.llm.structured.bound_schema`): a reply decoded under
    the bounded schema always fits in it, so it is the request's ``max_tokens`` on backends that
    constrain decoding. ``prompt_max_tokens`` caps replies on backends that only get the schema in
    the prompt (a small model may ramble there; the repair round and fallback handle the rest).
    """

    name: str
    schema: dict[str, Any]
    budget: int
    prompt_max_tokens: int

    @cached_property
    def bounded(self) -> dict[str, Any]:
        return bound_schema(self.schema, self.budget)


def role_budgets(roles: Mapping[str, Role], text_caps: Mapping[str, int], overrides: Mapping[str, int],
                 method: str) -> tuple[dict[str, Role], dict[str, int]]:
    """Apply per-role ``max_tokens`` overrides: a structured role's budget (its schema is re-bounded to it;
    the prompt-only cap never exceeds it), or a text role's cap. Unknown roles are a ConfigError."""
    unknown = sorted(set(overrides) - set(roles) - set(text_caps))
    if unknown:
        raise ConfigError(f"unknown {method} max_tokens role(s) {unknown}; roles: {sorted({*roles, *text_caps})}")
    out_roles = {name: replace(role, budget=overrides[name], prompt_max_tokens=min(role.prompt_max_tokens, overrides[name]))
                 if name in overrides else role for name, role in roles.items()}
    for role in out_roles.values():
        _ = role.bounded  # a budget too small for the schema fails here, at construction
    return out_roles, {**text_caps, **{k: v for k, v in overrides.items() if k in text_caps}}


REPAIR_PROMPT = (
    "Your previous reply could not be used ({error}). Reply again with only the JSON value described "
    "above, no explanation and no code fences."
)


def call_structured(llm: LLM, step: Step, role: Role, messages: Sequence[Message], parse: Callable[[str], T], *,
                    temperature: float = 0.0, stop: Sequence[str] = (), attempts: int = 2, retry: str = "repair",
                    retry_temperature: float = 0.7, send_schema: bool = True,
                    fallback: str = "") -> tuple[T | None, str]:
    """One structured exchange of ``role``: the bounded schema goes with the request (decoded under it
    where the backend can), ``parse`` turns the reply into a value or raises ParseError. A failed reply
    is retried up to ``attempts`` calls in all: ``retry="repair"`` sends the conversation back with a
    repair instruction, ``"resample"`` asks the same prompt again sampling at ``retry_temperature``
    (seed = attempt). A rejected reply's call carries ``parse_error`` and ``raw_reply``. The outcome is
    recorded on the last call (:func:`mark_exchange`): ``parsed`` when the first reply is strict JSON that
    fits the role's schema, ``repaired`` when a retry was needed or ``parse`` had to coerce the reply
    (prose around it, a flag written as a string, a bare Yes), ``fallback`` when nothing was usable (also
    noted in ``step.notes["fallbacks"]`` as ``"<role>: <fallback>"``). Returns (value or None, the first
    reply's text)."""
    if retry not in ("repair", "resample"):
        raise ConfigError(f"unknown retry mode {retry!r}; modes: ['repair', 'resample']")
    schema = role.bounded if send_schema else None
    limit = role.budget if send_schema and constrains_json(llm) else role.prompt_max_tokens
    req = LLMRequest(tuple(messages), max_tokens=limit, temperature=temperature, stop=tuple(stop), json_schema=schema)
    first: str | None = None
    for attempt in range(max(1, attempts)):
        suffix = "" if attempt == 0 else (":repair" if retry == "repair" else ":retry")
        resp = record_call(llm, step, role.name + suffix, req)
        first = resp.text if first is None else first
        try:
            value = parse(resp.text)
        except ParseError as exc:
            step.llm_calls[-1] = replace(step.llm_calls[-1], parse_error=str(exc), raw_reply=exc.raw or resp.text)
            step.notes.setdefault("parse_errors", []).append(f"{role.name}: {exc}")
            if retry == "repair":
                note = REPAIR_PROMPT.format(error=str(exc).split(": ", 1)[-1][:200])
                req = replace(req, messages=(*req.messages, Message("assistant", resp.text), Message("user", note)))
            elif retry_temperature > 0:
                req = replace(req, temperature=retry_temperature, seed=attempt + 1)
            continue
        mark_exchange(step, role.name, "parsed" if attempt == 0 and _strict(resp.text, role.schema) else "repaired")
        return value, first
    mark_exchange(step, role.name, "fallback", fallback or "no usable reply")
    return None, first or ""


def _strict(text: str, schema: dict[str, Any]) -> bool:
    """Whether ``text`` is one JSON value that fits ``schema`` as it stands (no coercion needed)."""
    try:
        return not validate(json.loads(text), schema)
    except ValueError:
        return False


def mark_exchange(step: Step, role: str, outcome: str, fallback: str = "") -> None:
    """Record how the reply of ``role`` (the step's last call of that role, its repair calls included) was
    read: ``parsed`` (as the prompt asks), ``repaired`` (after a retry, or read by a lenient rule such as an
    answer marker without its "So") or ``fallback`` (not usable: the method used ``fallback`` instead, noted in
    ``step.notes["fallbacks"]``). Every marked exchange counts in the run's protocol health per role, so
    ``fallback_rate`` moves whenever a method falls back. A fallback with no call of ``role`` is only noted."""
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}; outcomes: {list(OUTCOMES)}")
    for i in range(len(step.llm_calls) - 1, -1, -1):
        if step.llm_calls[i].role.split(":", 1)[0] == role:
            step.llm_calls[i] = replace(step.llm_calls[i], outcome=outcome)
            break
    if outcome == "fallback":
        step.notes.setdefault("fallbacks", []).append(f"{role}: {fallback or 'no usable reply'}")


_KEY_SEP = re.compile(r'"\s*:\s+(?=["\[{\dtfn<-])')  # '"thought": "' -> '"thought":"'
_ITEM_SEP = re.compile(r'(["\]}\d>]|true|false|null),\s+(?=[\[{]|"[^"\n]*"\s*[:,\]}])')  # '"a", "b"]' -> '"a","b"]'


def compact_json_examples(text: str) -> str:
    """``text`` (a prompt's fixed part: instructions, format, examples) with its JSON written without spaces
    after ``:`` and ``,``, the way schema-constrained decoding makes the reply
    (:data:`tandem.llm.structured.GRAMMAR_OPTIONS`). A prompt that shows ``{"notes": "..."}`` to a decoder that
    forbids the space made Qwen2.5-Coder-1.5B reply ``{"notes":"}"}`` (docs/llm.md, structured output)."""
    return _ITEM_SEP.sub(r"\1,", _KEY_SEP.sub('":', text))


def format_docs(docs: Sequence[Document]) -> str:
    """Documents numbered for a prompt: ``[1] Title: text``."""
    return "\n".join(f"[{i}] {d.title}: {d.text}" if d.title else f"[{i}] {d.text}" for i, d in enumerate(docs, 1))
