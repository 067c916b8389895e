"""Expected figures per method (benchmarks/baselines.yaml) recomputed with the scripted reader."""

from __future__ import annotations

import json

import pytest
from tests.conftest import benchmark_script, shared

from tandem.llm.base import LLMRequest, Message
from tandem.llm.jsonparse import validate
from tandem.methods.dualrag.prompts import SCHEMAS

script = benchmark_script("baselines")  # the scripted reader and the figures' settings live there
FIGURES, METHOD_SETTINGS = script.FIGURES, script.METHOD_SETTINGS
reader_reply, schema_instance = script.reader_reply, script.schema_instance


def test_recorded_figures_cover_every_method_and_figure():
    data = script.load()
    assert set(data["methods"]) == set(METHOD_SETTINGS)
    assert data["settings"] == {m: METHOD_SETTINGS[m] for m in data["methods"]}
    for figures in data["methods"].values():
        assert set(figures) == set(FIGURES)


def test_figures_match_a_fresh_run():
    data = script.load()
    shared(data["sample"]["dataset"])  # skips where ../shared/data is absent
    actual = script.compute(data["sample"])
    assert script.differences(data["methods"], actual) == []


def test_differences_name_each_figure_beyond_the_tolerance():
    expected = {"ircot": {"em": 0.1, "f1": 0.2}, "direct": {"em": 0.0}}
    actual = {"ircot": {"em": 0.1 + script.TOLERANCE / 2, "f1": 0.3}}
    assert script.differences(expected, actual) == ["direct: missing from the run",
                                                    "ircot.f1: expected 0.2, got 0.3"]


def test_docs_table_is_the_yaml_rendered():
    data = script.load()
    text = script.DOCS_PATH.read_text(encoding="utf-8")
    between = text.split(script.START, 1)[1].split(script.END, 1)[0]
    assert between.strip() == script.table(data).strip()
    for method, figures in data["methods"].items():
        row = next(line for line in between.splitlines() if line.startswith(f"| {method} |"))
        assert f"{figures['gold_doc_recall']:.3f}" in row


@pytest.mark.parametrize("role", sorted(SCHEMAS))
def test_schema_replies_are_valid_json_for_each_structured_role(role):
    reply = reader_reply(LLMRequest(messages=(Message("user", "Question: Who?\nDocuments:\n[1] Ann: Ann is."),),
                                    json_schema=SCHEMAS[role]))
    assert validate(json.loads(reply), SCHEMAS[role]) == []


def test_reader_replies_follow_the_prompt_not_the_answer():
    docs = "Documents:\n[1] Warsaw: Warsaw is the capital of Poland. It lies on the Vistula.\n[2] Paris: Paris is."
    plain = LLMRequest(messages=(Message("user", f"{docs}\nQuestion: Which city?"),))
    assert reader_reply(plain) == "Warsaw"
    ircot_system = Message("system", "Reply with 'So the answer is: ' at the end.")
    first = LLMRequest(messages=(ircot_system, Message("user", f"{docs}\nQuestion: q\nReasoning:\n")))
    assert reader_reply(first) == "Warsaw is the capital of Poland."
    later = LLMRequest(messages=(ircot_system, Message("user", f"{docs}\nQuestion: q\nReasoning:\nA thought.\n")))
    assert reader_reply(later) == "So the answer is: Warsaw"
    assert schema_instance({"type": "object", "properties": {"more": {"type": "boolean"}}}, "x", flag=True) == {"more": True}
