"""The command line `tandem llm serve` starts vLLM with (no vLLM needed: tests/integration/test_vllm_server.py runs it)."""

from __future__ import annotations

from pathlib import Path

from tandem.llm import vllm_server as S


def test_vllm_is_started_to_report_its_prefix_cache_and_take_embeddings():
    cmd = S.vllm_command(Path("/models/qwen"), "qwen", python="/venv/bin/python", port=8123)
    assert cmd[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--model") + 1] == "/models/qwen" and cmd[cmd.index("--port") + 1] == "8123"
    assert "--enable-prompt-tokens-details" in cmd  # usage.prompt_tokens_details.cached_tokens -> reused_tokens
    assert "--enable-prompt-embeds" in cmd  # R2AG's injected embeddings
