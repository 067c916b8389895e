"""DualRAG-FT with the embedded SmolLM2: two LoRA steps on chat examples, merged, loaded back as hf:DIR."""

from __future__ import annotations

import json

import pytest

from tandem.llm import load_llm
from tandem.llm.base import LLMRequest, Message
from tandem.methods.dualrag.finetune import SFTSettings, read_sft_json, train_sft

pytestmark = pytest.mark.integration

REPLY = '{"entities": [{"entity": "Marie Curie", "keywords": ["Marie Curie birthplace"]}]}'


def test_two_steps_then_generate_from_the_merged_model(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"messages": [{"role": "system", "content": "You plan retrieval. Reply in JSON."},
                          {"role": "user", "content": f"Question: {q}"}, {"role": "assistant", "content": REPLY}]}
            for q in ("Where was Marie Curie born?", "Which city was Marie Curie born in?")]
    (data / "entity_identifier.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    settings = SFTSettings(roles=["entity_identifier"], batch_size=1, lora_r=4, lr=1e-3)
    log = train_sft(data, "local", tmp_path / "model", settings, llm_opts={"num_threads": 1})
    assert log["finished"] and log["steps"] == 2 and log["base"] == "local"
    assert read_sft_json(tmp_path / "model")["target_tokens"] > 10
    tuned = load_llm(f"hf:{tmp_path / 'model'}", num_threads=1)
    assert tuned.model.config.hidden_size == 576  # the SmolLM2 architecture, LoRA merged away
    out = tuned.complete(LLMRequest(messages=tuple(Message(m["role"], m["content"]) for m in rows[0]["messages"][:2]),
                                    max_tokens=8))
    assert out.completion_tokens >= 1 and out.text
