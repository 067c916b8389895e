"""The scripted fake LLM, for tests: it lives in :mod:`tandem.llm.fake` (the ``fake`` backend)."""

from tandem.llm.fake import FakeLLM, FakeLLMScriptError

__all__ = ["FakeLLM", "FakeLLMScriptError"]
