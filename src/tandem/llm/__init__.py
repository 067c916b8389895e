"""LLM layer: typed requests/responses, backends behind one protocol, a response cache, JSON parsing.

Heavy backends (torch/transformers) are imported only when a spec needs them::

    from tandem.llm import LLMRequest, load_llm
    llm = load_llm("openai:qwen2.5:7b@http://127.0.0.1:11434/v1", cache="runs/llm-cache.sqlite")
    resp = llm.complete(LLMRequest.from_prompt("What is the capital of France?", max_tokens=16))
"""

from tandem.llm.backends import load_llm, parse_spec, split_model_url
from tandem.llm.base import (
    LLM,
    LLMRequest,
    LLMResponse,
    Message,
    truncate_at_stop,
    with_json_instruction,
)
from tandem.llm.cache import CachedLLM, cache_key, copy_responses
from tandem.llm.jsonparse import parse_json, validate
from tandem.llm.openai_compat import OpenAILLM

__all__ = [
    "LLM",
    "CachedLLM",
    "LLMRequest",
    "LLMResponse",
    "Message",
    "OpenAILLM",
    "cache_key",
    "copy_responses",
    "load_llm",
    "parse_json",
    "parse_spec",
    "split_model_url",
    "truncate_at_stop",
    "validate",
    "with_json_instruction",
]
