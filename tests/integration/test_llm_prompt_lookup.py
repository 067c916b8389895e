"""Prompt-lookup decoding on the OpenVINO engine (``prompt_lookup=N``), SmolLM2 on OpenVINO GenAI (real model,
CPU): replies that copy from the prompt, JSON under a schema, stop strings, and first tokens (which run on a
plain pipeline beside the drafting one) behave as without it."""

from __future__ import annotations

import json

import pytest
from tests.integration.engine_checks import check_first_tokens, check_stop_strings_and_length

from tandem.llm import LLMRequest, load_llm

pytestmark = pytest.mark.integration

pytest.importorskip("openvino_genai")
pytest.importorskip("xgrammar")

from tandem.llm import local  # noqa: E402 - after the importorskip guards
from tandem.llm.ov_engine import OVLLM  # noqa: E402

if local.exporter_python() is None:
    pytest.skip("the OpenVINO export environment is missing (bash scripts/setup.sh)", allow_module_level=True)

PASSAGE = ("Marie Curie was born in Warsaw in 1867. She moved to Paris in 1891 and studied physics at the "
           "University of Paris, where she met Pierre Curie.")


@pytest.fixture(scope="module")
def llm() -> OVLLM:
    model = load_llm("local", engine="openvino", dtype="float32", prompt_lookup=4)
    assert isinstance(model, OVLLM)
    return model


def test_the_run_notes_prompt_lookup_and_a_copying_reply_copies(llm: OVLLM) -> None:
    assert "prompt_lookup=4" in llm.engine_note
    req = LLMRequest.from_prompt(f"Passage: {PASSAGE}\nRepeat the passage's first sentence exactly.", max_tokens=40)
    resp = llm.complete(req)
    assert resp.text.startswith("Marie Curie was born") and "Warsaw" in resp.text and "Paris" in resp.text
    assert 0 < resp.completion_tokens <= 40


def test_first_tokens_run_beside_the_drafting_pipeline(llm: OVLLM) -> None:
    check_first_tokens(llm)


def test_stop_strings_length_and_schema_replies(llm: OVLLM) -> None:
    check_stop_strings_and_length(llm)
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "year": {"type": "integer"}},
              "required": ["city", "year"]}
    req = LLMRequest.from_prompt(f"Passage: {PASSAGE}\nWhere and when was Marie Curie born? Reply in JSON.",
                                 max_tokens=40, json_schema=schema)
    reply = json.loads(llm.complete(req).text)
    assert set(reply) == {"city", "year"} and isinstance(reply["year"], int)
