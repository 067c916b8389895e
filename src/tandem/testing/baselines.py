"""Baseline figures per method with a scripted reader: deterministic numbers to compare runs against.

:func:`scripted_reader` is a :class:`~tandem.testing.fake_llm.FakeLLM` that knows nothing about the
answers: it reads the prompt it is given and replies by fixed rules (the title of the first document
listed, one reasoning sentence taken from that document, a minimal instance of a JSON schema whose
strings are that title, or the prompt's question while it lists no documents, and whose flags are
true while it lists none). The
figures :func:`compute_baselines` reports for it therefore measure the methods' control flow and
retrieval (LLM calls, retrieval calls, gold-document recall) and how far "answer with the top
document's title" gets, not any model's quality. They are the expected values in
``benchmarks/baselines.yaml``; ``benchmarks/baselines.py`` recomputes them.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tandem.llm.types import LLMRequest
from tandem.methods.answers import ANSWER_MARKER

# one numbered document line as methods format them: "[1] Title: text"
_DOC_LINE = re.compile(r"^\[(\d+)\] ([^:\n]+): (.*)$", re.MULTILINE)
_QUESTION_LINE = re.compile(r"^Question: (.+)$", re.MULTILINE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")

# the methods with the settings the baselines run them with (bm25 index; no reranker model to load)
METHOD_SETTINGS: dict[str, dict[str, Any]] = {
    "direct": {},
    "naive_rag": {"k": 5},
    "oracle": {"mode": "paragraph"},
    "ircot": {"k": 5, "max_steps": 3},
    "dualrag": {"reranker": "none", "keyword_retriever": "index", "max_iter": 3},
    "cooprag": {"reranker": "none", "first_stage": "index", "k": 5},
    "iter_retgen": {"k": 5, "iterations": 3},
    "genground": {"reranker": "none", "max_iter": 3, "k": 6},
    "metarag": {"reranker": "none", "k": 5, "max_iter": 3, "monitor": "off"},
}
# the figures recorded per method (means over the questions)
FIGURES = ("em", "f1", "acc", "gold_doc_recall", "llm_calls_per_q", "retrieval_calls_per_q", "errors")


def _listed_docs(text: str) -> list[tuple[str, str]]:
    """(title, text) of the documents listed in the prompt's last "Documents:" block (or anywhere)."""
    start = text.rfind("Documents:")
    found = _DOC_LINE.findall(text[start:] if start >= 0 else text)
    return [(title.strip(), body.strip()) for _, title, body in found]


def schema_instance(schema: Mapping[str, Any], fill: str, flag: bool = False) -> Any:
    """A small value valid under ``schema``: strings are ``fill`` (or the first enum value), arrays
    hold one item (or none where ``maxItems`` is 0), numbers their minimum or 0, booleans ``flag``."""
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return schema_instance(schema[key][0], fill, flag)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        return {name: schema_instance(sub, fill, flag) for name, sub in props.items()}
    if kind == "array":
        if schema.get("maxItems") == 0:
            return []
        return [schema_instance(schema.get("items", {"type": "string"}), fill, flag)]
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return flag
    if kind == "null":
        return None
    text = fill or "unknown"
    limit = schema.get("maxLength")
    return text[:limit] if isinstance(limit, int) else text


def reader_reply(req: LLMRequest) -> str:
    """The scripted reader's reply to one request (see the module docstring)."""
    docs = _listed_docs(req.last_user)
    title = docs[0][0] if docs else ""
    if req.json_schema is not None:
        # flags such as DualRAG's need_retrieve: true while the prompt lists no documents
        questions = _QUESTION_LINE.findall(req.last_user)
        fill = title or (questions[-1].strip() if questions else "")
        return json.dumps(schema_instance(req.json_schema, fill, flag=not docs))
    system = " ".join(m.content for m in req.messages if m.role == "system")
    if ANSWER_MARKER in system:  # an IRCoT reasoning step: one sentence from the top document, then the answer
        reasoning = req.last_user.rsplit("Reasoning:\n", 1)[-1]
        if not reasoning.strip() and docs:
            return _SENTENCE_END.split(docs[0][1], 1)[0]
        return f"{ANSWER_MARKER} {title or 'unknown'}"
    return title or "unknown"


def scripted_reader() -> Any:
    """A FakeLLM answering every request with :func:`reader_reply`."""
    from tandem.testing.fake_llm import FakeLLM

    return FakeLLM(default=reader_reply, name="scripted-reader", spec="fake")


def _retrieval_calls(trace: Mapping[str, Any]) -> int:
    """Queries a method sent to its retriever: every query its serialised trace's steps recorded."""
    return sum(len(step.get("queries", [])) for step in trace.get("steps", []))


def compute_baselines(dataset_path: str | Path, n: int = 10,
                      methods: Sequence[str] = tuple(METHOD_SETTINGS)) -> dict[str, dict[str, float]]:
    """Run ``methods`` with :func:`scripted_reader` on the first ``n`` questions of ``dataset_path``
    over a BM25 index of its passage pool (built in a temporary folder); figures per method, rounded
    to 4 places."""
    from tandem.corpus.loaders import load_dataset
    from tandem.eval.runner import run_one
    from tandem.index import build_index, open_index
    from tandem.methods import Search, build_method
    from tandem.retrieve import open_retriever

    dataset = load_dataset(dataset_path)
    questions = dataset.questions[:n]
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="tandem-baselines-") as tmp:
        build_index(dataset.passages, Path(tmp) / "index", kind="bm25")
        index = open_index(Path(tmp) / "index")
        search = Search(open_retriever(index), index.store)
        for name in methods:
            method = build_method(name, scripted_reader(), search, index.store, **METHOD_SETTINGS[name])
            records = [run_one(method, q, judge_llm=None, reanswer_llm=None) for q in questions]
            ok = [r for r in records if "error" not in r]
            count = max(1, len(ok))
            recalls = [r["gold_doc_recall"] for r in ok if r["gold_doc_recall"] is not None]
            figures = {
                "em": sum(r["scores"]["em"] for r in ok) / count,
                "f1": sum(r["scores"]["f1"] for r in ok) / count,
                "acc": sum(r["scores"]["acc"] for r in ok) / count,
                "gold_doc_recall": sum(recalls) / len(recalls) if recalls else 0.0,
                "llm_calls_per_q": sum(r["llm_calls"] for r in ok) / count,
                "retrieval_calls_per_q": sum(_retrieval_calls(r["trace"]) for r in ok) / count,
                "errors": float(len(records) - len(ok)),
            }
            results[name] = {key: round(float(figures[key]), 4) for key in FIGURES}
    return results

