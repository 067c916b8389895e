"""The ``local`` backend's OpenVINO engine (``engine=openvino``): SmolLM2 on OpenVINO GenAI (real model, CPU; the first run
exports the model once, ~30-80 s)."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from tests.integration.engine_checks import (
    check_first_tokens,
    check_seeded_sampling_is_reproducible,
    check_stop_strings_and_length,
)

from tandem.errors import ConfigError
from tandem.llm import LLMRequest, load_llm
from tandem.llm.structured import bound_schema

pytestmark = pytest.mark.integration

pytest.importorskip("openvino_genai")
pytest.importorskip("xgrammar")

from tandem.llm import local, ov_process  # noqa: E402 - after the importorskip guards
from tandem.llm.ov_engine import OVLLM  # noqa: E402

if local.exporter_python() is None:
    pytest.skip("the OpenVINO export environment is missing (bash scripts/setup.sh)", allow_module_level=True)

FRANCE = LLMRequest.from_prompt("What is the capital of France? Answer in one word.", max_tokens=32)
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "year": {"type": "integer"},
                                           "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["city", "year", "tags"]}


@pytest.fixture(scope="module")
def llm() -> OVLLM:
    model = load_llm("local", engine="openvino")
    assert isinstance(model, OVLLM)
    return model


def test_greedy_answer_is_sensible_and_counted_like_torch(llm: OVLLM) -> None:
    resp = llm.complete(FRANCE)
    assert "Paris" in resp.text and "<|im_end|>" not in resp.text
    assert resp.finish_reason == "stop"
    # the same prompt ids as the transformers engine: chat template through the same tokenizer
    assert resp.prompt_tokens == llm.count_tokens(llm.tokenizer.apply_chat_template(
        [m.to_dict() for m in FRANCE.messages], add_generation_prompt=True, tokenize=False))
    assert 0 < resp.completion_tokens < FRANCE.max_tokens
    assert llm.complete(FRANCE).text == resp.text  # greedy is deterministic (prefix cache hit the 2nd time)


def test_first_tokens_are_the_likeliest_with_their_log_probabilities(llm: OVLLM) -> None:
    check_first_tokens(llm)


def test_a_prompt_that_extends_one_sent_before_counts_its_reused_blocks(llm: OVLLM) -> None:
    """The prefix ledger: a prompt that begins like a finished one reuses its whole 32-token blocks; one
    that begins otherwise reuses at most what every prompt shares (the chat template's opening)."""
    passage = " ".join(f"Fact {i}: the river number {i} flows past town {i * 7}." for i in range(40))
    first = llm.complete(LLMRequest.from_prompt(passage + "\nWhich river passes town 21?", max_tokens=8))
    again = llm.complete(LLMRequest.from_prompt(passage + "\nWhich river passes town 70?", max_tokens=8))
    other = llm.complete(LLMRequest.from_prompt(passage[::-1] + "\nWhich river?", max_tokens=8))
    shared_ids = llm.count_tokens(passage)
    assert first.prompt_tokens > 300 and first.reused_tokens < first.prompt_tokens // 2
    assert shared_ids - 64 <= again.reused_tokens <= again.prompt_tokens - 1  # the passage, block by block
    assert again.reused_tokens % 32 == 0 and other.reused_tokens <= 64


def test_stop_strings_and_length(llm: OVLLM) -> None:
    check_stop_strings_and_length(llm)
    # the worker ends the request at the stop string (not only the text cut after 80 tokens)
    resp = llm.complete(LLMRequest.from_prompt("Count from 1 to 20, separated by commas.", max_tokens=80, stop=("7",)))
    assert resp.finish_reason == "stop" and resp.completion_tokens < 40


def test_seeded_sampling_is_reproducible(llm: OVLLM) -> None:
    check_seeded_sampling_is_reproducible(llm)

def test_schema_decoding_is_compact_valid_json(llm: OVLLM) -> None:
    schema = bound_schema(SCHEMA, 64)
    req = LLMRequest.from_prompt("Name a city and the year it was founded, as JSON.", max_tokens=64,
                                 json_schema=schema)
    resp = llm.complete(req)
    value = json.loads(resp.text)
    assert resp.constrained and resp.finish_reason == "stop"
    assert set(value) <= {"city", "year", "tags"} and isinstance(value["city"], str)
    assert len(value["city"]) <= schema["properties"]["city"]["maxLength"] and 0 <= value["year"] <= 999
    assert resp.text == json.dumps(value, ensure_ascii=False, separators=(",", ":"))  # no free whitespace


def test_concurrent_requests_decode_together_each_with_its_grammar(llm: OVLLM) -> None:
    schema = bound_schema(SCHEMA, 64)
    reqs = [LLMRequest.from_prompt(f"Name city number {i} and its founding year, as JSON.", max_tokens=64,
                                   json_schema=schema if i % 2 else None) for i in range(8)]
    llm.peak_batch = 0
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(llm.complete, reqs))
    assert llm.peak_batch >= 4, "requests from several threads run in one batch"
    for resp, req in zip(together, reqs, strict=True):
        assert resp.constrained == (req.json_schema is not None)
        if req.json_schema is not None:
            json.loads(resp.text)
    # (greedy answers may part from the one-at-a-time ones after a near tie: bf16 sums depend on batch shape)


def test_relaxed_strings_give_the_bounded_grammars_replies_with_continuations(llm: OVLLM) -> None:
    from tandem.methods.dualrag import prompts as dualrag_prompts

    bounded = load_llm("local", engine="openvino", relax_strings=False)
    assert isinstance(bounded, OVLLM) and "relax_strings=False" in bounded.engine_note
    assert "relax_strings=True" in llm.engine_note
    prompts = ["Summarize everything known about the director of the film that won Best Picture in 1995. "
               "Write a long detailed paragraph.",
               "Describe the history of the Roman Empire in great detail, with many names and dates."]
    before = (llm.relaxed_requests, llm.continuations)
    roles = (dualrag_prompts.SUMMARIZER, dualrag_prompts.ENTITY_IDENTIFIER)
    for role in roles:
        for prompt in prompts:
            req = LLMRequest.from_prompt(prompt, max_tokens=role.budget, json_schema=role.bounded)
            fast, slow = llm.complete(req), bounded.complete(req)
            assert (fast.text, fast.completion_tokens, fast.finish_reason) == (slow.text, slow.completion_tokens,
                                                                                 slow.finish_reason), role.name
    assert llm.relaxed_requests - before[0] == len(roles) * len(prompts)
    assert llm.continuations > before[1], "some string reached its bound and the reply went on from there"
    bounded.close()


def test_the_engine_runs_in_its_own_process_and_a_dead_one_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipeline steps in a process of its own (openvino-genai holds the GIL through a step, which
    would stop this process's other threads): while it prefills a long prompt, a thread here keeps
    running; a cancelled question's request leaves the batch; a request waiting when that process dies
    fails with an error that says so, and the next request starts a new one; so does one that stops
    computing (the watchdog ends it)."""
    import os
    import signal
    import threading

    from tandem.errors import Cancelled, LLMError
    from tandem.types import TraceObserver, observe_traces

    llm = load_llm("local", engine="openvino", step_tokens=2048, engine_process=True)  # a long prompt in one step
    assert isinstance(llm, OVLLM) and llm._worker.proc.pid != os.getpid()
    long = LLMRequest.from_prompt("Repeat these words. " + "alpha beta gamma delta " * 400, max_tokens=400)
    ticks, done = [0], threading.Event()

    def tick() -> None:
        while not done.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    ticker = threading.Thread(target=tick)
    ticker.start()
    start = time.perf_counter()
    llm.complete(long)
    seconds = time.perf_counter() - start
    done.set()
    ticker.join()
    # in-process, the thread advanced once per engine step (~2 s for this prompt on 2 cores)
    assert ticks[0] > 50 * seconds / 2, (ticks[0], seconds)

    # a question cancelled while its call waits (the server's client went away): the call raises, and
    # the request leaves the batch (the next request decodes alone)
    observer, cancelled = TraceObserver(lambda i, step: None), []

    def cancelled_call() -> None:
        with observe_traces(observer):
            # a prompt not cached, ~5,000 tokens: seconds of prefill even in bf16 with AMX (the reply could end
            # within the second a shorter one leaves)
            unseen = LLMRequest.from_prompt("Repeat these words. " + "kappa lambda mu nu " * 1000, max_tokens=400)
            cancelled.append(_error_of(llm, unseen, Cancelled))

    caller = threading.Thread(target=cancelled_call)
    caller.start()
    time.sleep(1.0)  # the request is in the engine
    observer.cancelled.set()
    caller.join(30)
    assert cancelled and cancelled[0].startswith("cancelled")
    llm.peak_batch = 0
    assert "Paris" in llm.complete(FRANCE).text and llm.peak_batch == 1

    failed: list[str] = []
    fresh = LLMRequest.from_prompt("Repeat these words. " + "epsilon zeta eta theta " * 1000, max_tokens=400)
    waiter = threading.Thread(target=lambda: failed.append(_error_of(llm, fresh, LLMError)))
    waiter.start()
    time.sleep(1.0)  # the request is in the engine, prefilling (seconds)
    os.kill(llm._worker.proc.pid, signal.SIGKILL)
    waiter.join(60)
    assert failed and "engine process ended (killed by signal 9) before replying" in failed[0]
    monkeypatch.setattr(ov_process, "STALL_S", 5.0)  # the new engine's watchdog: a stall is 5 s
    monkeypatch.setattr(ov_process, "STALL_CPU_S", 0.01)  # of under 10 ms CPU (a busy machine's engine gets more)
    assert "Paris" in llm.complete(FRANCE).text  # a new engine process

    # an engine that stops computing while a request waits (as OpenVINO GenAI's step once did) is ended
    # by the watchdog, with an error that says so, and the next request starts a new one
    stalled: list[str] = []
    waiter = threading.Thread(target=lambda: stalled.append(_error_of(llm, fresh, LLMError)))
    waiter.start()
    time.sleep(1.0)
    os.kill(llm._worker.proc.pid, signal.SIGSTOP)
    waiter.join(60)
    assert stalled and "the engine computed nothing for" in stalled[0] and "killed by signal 9" in stalled[0]
    assert "Paris" in llm.complete(FRANCE).text
    llm.close()
    with pytest.raises(LLMError, match="the engine is closed"):
        llm.complete(FRANCE)


def _error_of(llm: OVLLM, req: LLMRequest, kind: type[Exception]) -> str:
    try:
        llm.complete(req)
    except kind as exc:
        return str(exc)
    return "no error"


def test_bad_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="engine"):
        load_llm("local", engine="tpu")
    with pytest.raises(ConfigError, match="weights"):
        load_llm("local", engine="openvino", weights="int3")
    with pytest.raises(ConfigError, match="need engine=openvino"):
        load_llm("local", engine="torch", max_batch=4)
    with pytest.raises(ConfigError, match="kv_cache 'q4'"):
        load_llm("local", engine="openvino", kv_cache="q4")
    with pytest.raises(ConfigError, match="kv_cache=float32 needs dtype=float32"):
        load_llm("local", engine="openvino", dtype="bfloat16", kv_cache="float32")
    with pytest.raises(ConfigError, match="dynamic_quantization is a whole number >= 0, got -1"):
        load_llm("local", engine="openvino", dynamic_quantization=-1)
    with pytest.raises(ConfigError, match="dynamic_quantization is a whole number, got 'abc'"):
        load_llm("local", engine="openvino", dynamic_quantization="abc")
    with pytest.raises(ConfigError, match="step_tokens must be >= max_batch"):
        load_llm("local", engine="openvino", step_tokens=8)
    with pytest.raises(ConfigError, match="step_tokens is a whole number, got 'lots'"):
        load_llm("local", engine="openvino", step_tokens="lots")
    with pytest.raises(ConfigError, match="prompt_lookup must be >= 0, got -2"):
        load_llm("local", engine="openvino", prompt_lookup=-2)
    with pytest.raises(ConfigError, match="prompt_lookup is a whole number >= 0, got -2"):  # built directly
        OVLLM("/nowhere", "/nowhere", prompt_lookup=-2)
    with pytest.raises(ConfigError, match="relax_strings is true or false, got 'maybe'"):
        load_llm("local", engine="openvino", relax_strings="maybe")
    with pytest.raises(ConfigError, match="engine_process is true or false, got 'yes'"):
        load_llm("local", engine="openvino", engine_process="yes")


def test_embeddings_path_goes_to_transformers(llm: OVLLM) -> None:
    ids = llm.encode_chat(FRANCE.messages)
    embeds = llm.input_embeddings()(ids)
    assert embeds.shape == (1, ids.shape[1], llm.model.config.hidden_size)
    assert "Paris" in llm.generate_from_embeds(embeds, max_tokens=32).text


def test_export_is_cached(llm: OVLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local.subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(AssertionError("re-export")))
    start = time.perf_counter()
    again = load_llm("local", engine="openvino")
    assert again.complete(FRANCE).text == llm.complete(FRANCE).text
    assert Path(again.path, local.MARKER).is_file()
    print(f"warm load: {time.perf_counter() - start:.2f}s")
    again.close()


def test_q4_1_weights_are_the_gguf_blocks_and_answer_like_torch(llm: OVLLM) -> None:
    """weights=q4_1 puts the GGUF's own 4-bit blocks into the export: every linear layer replaced, each
    weight equal to the fp16 export's up to its f16 rounding, and the greedy answer the fp32 one."""
    import numpy as np
    import openvino as ov

    from tandem.llm import ov_gguf

    q41 = load_llm("local", engine="openvino", weights="q4_1", dtype="float32", kv_cache="float32")
    marker = json.loads(Path(q41.path, local.MARKER).read_text())
    assert marker["replaced"] == {"q4_1": 30 * 7, "q8_0": 1}
    model = ov.Core().read_model(str(Path(q41.path, "openvino_model.xml")))
    types = {op.get_element_type().get_type_name() for op in model.get_ordered_ops() if op.get_type_name() == "Constant"}
    assert "u4" in types and "i8" in types
    fp16 = ov.Core().read_model(str(Path(marker["from"], "openvino_model.xml")))
    ref = next(op for op in fp16.get_ordered_ops()
               if op.get_friendly_name() == ov_gguf.EXPORT_NAME.format(module="layers.5.self_attn.k_proj"))
    from gguf import GGUFReader

    tensor = next(t for t in GGUFReader(marker["source"]).tensors if t.name == "blk.5.attn_k.weight")
    codes, scale, zero = ov_gguf.q4_1_weight(np.asarray(tensor.data), heads=3)
    weight = (scale * (codes - zero)).reshape(ref.get_output_shape(0))
    assert np.abs(weight - ref.get_data().astype(np.float32)).max() <= 2 ** -10  # f16 rounding of |w| < 2
    assert q41.complete(FRANCE).text == load_llm("local", engine="torch").complete(FRANCE).text
    q41.close()


def test_a_run_records_the_engine_that_answered(tmp_path: Path) -> None:
    """A run's config.json notes say which engine, weights and precision answered, even when its options
    left them to the defaults (which have moved before)."""
    from tests.conftest import shared
    from typer.testing import CliRunner

    from tandem.cli import app

    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["eval", "qa", "--method", "direct", "--dataset", str(shared("fixtures/hotpot_example.jsonl")),
                                   "--llm", "local", "--limit", "1", "--no-cache", "--out", str(out)])
    assert res.exit_code == 0, res.output
    config = json.loads((out / "config.json").read_text())
    assert config["llm"]["options"] == {}  # nothing given on the command line ...
    note = config["notes"]["llm_engine"]  # ... yet the run says what answered
    fast = local.fast_settings(local.default_model())  # the model's fast settings where the CPU has passed them
    kv = "float32" if fast.dtype == "float32" else local.DEFAULT_KV_CACHE
    assert note.startswith("openvino ") and "-ov-q4_1-" in note and f"dtype={fast.dtype}," in note and f"kv_cache={kv}," in note
    assert "dynamic_quantization=0" in note and f"prompt_lookup={fast.prompt_lookup}," in note
    assert f"cpu={local.cpu_kind()}" in note  # the kind of CPU the precision was chosen for


def test_the_embeddings_path_computes_in_the_engines_dtype() -> None:
    """R²AG generates from input embeddings through the transformers model: in bf16 where the engine is asked
    for bf16 (an R²-Former trained through a bf16 LLM is read by a bf16 one), f32 otherwise."""
    import torch

    bf16 = load_llm("local", engine="openvino", dtype="bfloat16")
    assert isinstance(bf16, OVLLM)
    assert bf16.torch_llm.model.dtype == torch.bfloat16
    assert "bfloat16" in bf16.torch_llm.engine_note
    f32 = load_llm("local", engine="openvino", dtype="float32", kv_cache="float32")
    assert isinstance(f32, OVLLM)
    assert f32.torch_llm.model.dtype == torch.float32
