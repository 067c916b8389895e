"""The embedded SmolLM2 through the ``local`` backend's transformers engine (``engine=torch``; real model,
CPU; first run converts ~20-40 s). The default OpenVINO engine: tests/integration/test_llm_openvino.py."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from tests.integration.engine_checks import (
    check_first_tokens,
    check_seeded_sampling_is_reproducible,
    check_stop_strings_and_length,
)

from tandem.llm import CachedLLM, LLMRequest, load_llm

pytestmark = pytest.mark.integration

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tandem.llm import convert, local  # noqa: E402 - after the importorskip guards
from tandem.llm.hf import HFLLM  # noqa: E402

FRANCE = LLMRequest.from_prompt("What is the capital of France? Answer in one word.", max_tokens=32)


@pytest.fixture(scope="module")
def llm() -> HFLLM:
    model = load_llm("local", engine="torch")
    assert isinstance(model, HFLLM)
    return model


def test_greedy_answer_is_sensible(llm: HFLLM) -> None:
    resp = llm.complete(FRANCE)
    assert "Paris" in resp.text
    assert resp.finish_reason == "stop"
    assert resp.prompt_tokens > 10 and 0 < resp.completion_tokens < FRANCE.max_tokens
    assert llm.complete(FRANCE).text == resp.text  # greedy is deterministic


def test_generation_ends_at_im_end(llm: HFLLM) -> None:
    im_end = llm.tokenizer.convert_tokens_to_ids("<|im_end|>")
    im_start = llm.tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert llm.eos_token_ids[0] == im_end and im_start not in llm.eos_token_ids
    ids = llm.encode_chat(FRANCE.messages)
    with torch.inference_mode():
        out = llm.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=32, do_sample=False)
    assert out[0, -1].item() == im_end  # the saved generation config ends the turn at <|im_end|>
    resp = llm.complete(FRANCE)
    assert "<|im_end|>" not in resp.text and "<|im_start|>" not in resp.text


def test_many_threads_share_one_model(llm: HFLLM) -> None:
    with ThreadPoolExecutor(max_workers=3) as pool:
        texts = list(pool.map(lambda r: llm.complete(r).text, [FRANCE] * 3))
    assert len(set(texts)) == 1 and "Paris" in texts[0]


def test_stop_strings_and_length(llm: HFLLM) -> None:
    check_stop_strings_and_length(llm)


def test_first_tokens_are_the_likeliest_with_their_log_probabilities(llm: HFLLM) -> None:
    check_first_tokens(llm)


def test_seeded_sampling_is_reproducible(llm: HFLLM) -> None:
    check_seeded_sampling_is_reproducible(llm)

def test_embeddings_path_matches_text_path(llm: HFLLM) -> None:
    ids = llm.encode_chat(FRANCE.messages)
    embeds = llm.input_embeddings()(ids)
    from_embeds = llm.generate_from_embeds(embeds, max_tokens=32)
    assert from_embeds.text == llm.complete(FRANCE).text
    out = llm.forward(ids)
    assert len(out.hidden_states) == llm.model.config.num_hidden_layers + 1
    assert out.logits.shape[:2] == ids.shape


def test_the_converted_folder_holds_the_ggufs_weights(llm: HFLLM) -> None:
    from transformers import AutoModelForCausalLM

    gguf = convert.gguf_file("smollm2")
    direct = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    ours, theirs = llm.model.state_dict(), direct.state_dict()
    assert sorted(ours) == sorted(theirs)
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert not hasattr(llm.model.config, "quantization_config")


def test_second_load_uses_the_cache(llm: HFLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_conversion(*args: object) -> float:
        raise AssertionError("the converted model should have been reused")

    monkeypatch.setattr(convert, "_convert", no_conversion)
    start = time.perf_counter()
    again = load_llm("local", engine="torch")
    elapsed = time.perf_counter() - start
    assert again.complete(FRANCE).text == llm.complete(FRANCE).text
    assert Path(again.path, local.MARKER).is_file()
    print(f"warm load: {elapsed:.2f}s")


def test_hf_backend_on_the_converted_folder(llm: HFLLM, tmp_path: Path) -> None:
    hf = load_llm(f"hf:{llm.path}", cache=tmp_path / "cache.sqlite")
    assert isinstance(hf, CachedLLM)
    first = hf.complete(FRANCE)
    second = hf.complete(FRANCE)
    assert first.text == llm.complete(FRANCE).text
    assert second.cached and not first.cached
