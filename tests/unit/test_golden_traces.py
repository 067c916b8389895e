"""Golden traces: each method, run on a deterministic fake LLM over a small BM25 index, makes exactly the
trace recorded in ``tests/golden/<method>.json`` (its steps, queries, hits, prompts, replies and notes).
A refactor must leave them alone; a change of behaviour re-records them on purpose:

    TANDEM_RECORD_GOLDEN=1 python -m pytest tests/unit/test_golden_traces.py
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tandem.compose import build_method
from tandem.llm.base import LLMRequest
from tandem.llm.fake import FakeLLM
from tandem.types import Question

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
METHODS = ("direct", "naive_rag", "oracle", "ircot", "iter_retgen", "genground", "metarag", "dualrag", "cooprag")
#: settings that keep a trace machine-independent: no encoder scores (float sums differ by CPU) in it. R²AG has no
#: golden trace: it needs a trained R²-Former and a model's input embeddings (tests/unit/test_r2ag*.py cover it).
#: (The default encoder is int8 onnxruntime, whose sums differ more across CPUs, VNNI/AMX against AVX2, than
#: float rounding: ~0.01 in a cosine.)
SETTINGS = {"dualrag": {"reranker": "none"}, "cooprag": {"reranker": "none", "first_stage": "index"},
            "genground": {"reranker": "none"}, "metarag": {"reranker": "none"}}
#: step notes that hold an encoder's score; the decision made from it stays in the trace (MetaRAG's ``stop``)
ENCODER_NOTES = ("similarity",)
QUESTIONS = (Question("g1", "Which river flows through the city where Marie Curie was born?", ("Vistula",), ("d1", "d3")),
             Question("g2", "In which city was the wife of Pierre Curie born?", ("Warsaw",), ("d1", "d2")))
WORDS = ("Warsaw", "Marie Curie", "Vistula", "Paris", "Poland")


def _pick(text: str, salt: str, n: int) -> int:
    return int(hashlib.sha256((salt + text).encode()).hexdigest()[:8], 16) % n


def _instance(schema: dict[str, Any], root: dict[str, Any], key: str) -> Any:
    """A value valid under ``schema``, chosen from ``key`` (the prompt): the same prompt, the same reply."""
    if "$ref" in schema:
        return _instance(root["$defs"][schema["$ref"].rsplit("/", 1)[-1]], root, key)
    for alt in ("anyOf", "oneOf"):
        if alt in schema:
            return _instance(schema[alt][0], root, key)
    if "enum" in schema:
        return schema["enum"][_pick(key, "enum", len(schema["enum"]))]
    kind = schema.get("type")
    if kind == "object":
        return {name: _instance(sub, root, key + name) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        return [_instance(schema.get("items", {"type": "string"}), root, key + str(i))
                for i in range(max(1, schema.get("minItems", 0)))]
    if kind == "boolean":
        return _pick(key, "bool", 3) > 0
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    word = WORDS[_pick(key, "word", len(WORDS))]
    return f"{word} was born in Warsaw" if "thought" in key or "notes" in key else word


def reply(req: LLMRequest) -> str:
    """What the fake model says: a schema-valid object for a JSON request; else a sentence that ends a chain
    for some prompts and not for others."""
    prompt = "\n".join(m.content for m in req.messages)
    if req.json_schema is not None:
        return json.dumps(_instance(req.json_schema, req.json_schema, prompt))
    word = WORDS[_pick(prompt, "text", len(WORDS))]
    if _pick(prompt, "end", 3) == 0:
        return f"{word} is on the Vistula."
    return f"Marie Curie was born in {word}. So the answer is: {word}."


def _trace(method: str, search) -> list[dict[str, Any]]:
    llm = FakeLLM(default=reply, constrains_json=True)
    built = build_method(method, llm, search, settings=SETTINGS.get(method))
    out = []
    for q in QUESTIONS:
        answer = built.answer(q)
        steps = [{k: v for k, v in s.to_dict().items()} for s in answer.trace.steps]
        for step in steps:
            for call in step["llm_calls"]:
                call.pop("latency_s", None)
            for key in ENCODER_NOTES:
                step.get("notes", {}).pop(key, None)
        out.append({"question": q.id, "answer": answer.text, "steps": steps})
    return json.loads(json.dumps(out))


@pytest.mark.parametrize("method", METHODS)
def test_the_trace_is_the_recorded_one(method, search):
    got = _trace(method, search)
    path = GOLDEN / f"{method}.json"
    if os.environ.get("TANDEM_RECORD_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    assert path.is_file(), f"no golden trace for {method}: record it (see the module doc)"
    assert got == json.loads(path.read_text(encoding="utf-8"))
