"""Test helpers shipped with the package: a scripted fake LLM and a fake OpenAI-compatible server."""

from tandem.testing.fake_llm import FakeLLM, FakeLLMScriptError
from tandem.testing.fake_server import FakeOpenAIServer, Fault, echo_answer

__all__ = ["FakeLLM", "FakeLLMScriptError", "FakeOpenAIServer", "Fault", "echo_answer"]
