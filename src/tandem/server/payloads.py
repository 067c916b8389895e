"""The JSON the server answers with, and the adapters' shapes built from it: a trace step and an answer
(``/v1/ask``), a passage (``/v1/retrieve``, MCP ``search``, the framework adapters) and the short chain of
evidence (MCP ``ask``, the adapters). The server and :mod:`tandem.integrations` both read these."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tandem.index.store import DocStore
from tandem.types import Answer, Step

Passage = dict[str, Any]
PASSAGE_KEYS = ("id", "title", "text", "score", "rank", "metadata")


def passage(hit: Mapping[str, Any]) -> Passage:
    """A hit joined with its passage (the server's shape: ``doc_id``, ``score``, ``rank``, ``id``,
    ``title``, ``text``) -> the adapters' passage dict."""
    return {key: hit[key] for key in PASSAGE_KEYS if key in hit}


def step_payload(i: int, step: Step, store: DocStore | None) -> dict[str, Any]:
    """One trace step as JSON, its hits with their passages' title and text (for the page)."""
    data = {"index": i, **step.to_dict()}
    if store is not None:
        data["hits"] = [{**h, **({"title": store.get(h["doc_id"]).title, "text": store.get(h["doc_id"]).text}
                                 if h["doc_id"] in store else {})} for h in data["hits"]]
    return data


def answer_payload(answer: Answer, store: DocStore | None, method: str, seconds: float) -> dict[str, Any]:
    """The JSON an ask returns: answer, the passages shown to the LLM, the full trace and its cost."""
    cited = [store.get(d).to_dict() for d in answer.trace.docs_read if store is not None and d in store]
    calls = answer.trace.llm_calls
    trace = {"steps": [step_payload(i, s, store) for i, s in enumerate(answer.trace.steps)],
             "docs_read": answer.trace.docs_read}
    return {
        "answer": answer.text, "method": method, "cited": cited, "trace": trace,
        "cost": {"llm_calls": len(calls), "prompt_tokens": sum(c.prompt_tokens for c in calls),
                 "completion_tokens": sum(c.completion_tokens for c in calls),
                 "reused_tokens": sum(c.reused_tokens for c in calls), "seconds": round(seconds, 3)},
    }


def evidence(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A short chain of evidence from an answer's trace: per step its name, queries, the passages it
    found (id, title, score) and its notes (thoughts, outline, sub-questions); no prompts."""
    steps = []
    for step in result["trace"]["steps"]:
        hits = [{"id": h["doc_id"], "title": h.get("title"), "score": h.get("score")} for h in step["hits"]]
        steps.append({"step": step["name"], "queries": step["queries"], "passages": hits, "notes": step["notes"]})
    return steps


__all__ = ["PASSAGE_KEYS", "Passage", "answer_payload", "evidence", "passage", "step_payload"]
