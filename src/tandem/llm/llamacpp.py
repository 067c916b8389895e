"""Optional ``llamacpp:PATH`` backend: a GGUF model through llama-cpp-python, in-process.

llama-cpp-python is not a dependency (PyPI ships it as source only: a 10+ minute build). Install
it with ``pip install 'tandem[llamacpp]'``. On VMs whose CPU advertises AMX but refuses it, the
default native build crashes at the first decode: pass ``use_extra_bufts=False`` (forwarded to
``llama_cpp.Llama``) or build portably with
``CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"``.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from typing import Any

from tandem.errors import ConfigError, LLMError
from tandem.llm.base import (
    LLMRequest,
    LLMResponse,
    truncate_at_stop,
    with_json_instruction,
)
from tandem.model_files import resolve_model

INSTALL_HINT = (
    "the llamacpp backend needs llama-cpp-python, which is not installed: "
    "pip install 'tandem[llamacpp]' (a source build of 10+ minutes), or use the 'local' backend"
)


class LlamaCppLLM:
    """A GGUF model run by ``llama_cpp.Llama``; one generation at a time per instance (a lock).

    Args:
        path: a GGUF file or an embedded model name (``smollm2``).
        n_ctx: context window; ``n_threads``: CPU threads (default: CPUs available).
        llama_kwargs: passed to ``llama_cpp.Llama`` as they are (e.g. ``use_extra_bufts=False``).
    """

    def __init__(
        self,
        path: str = "smollm2",
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        spec: str | None = None,
        json_mode: str = "schema",
        **llama_kwargs: Any,
    ) -> None:
        if json_mode not in ("schema", "prompt"):
            raise ConfigError(f"unknown json_mode {json_mode!r} for llamacpp; modes: ['prompt', 'schema']")
        self.json_mode = json_mode
        try:
            llama_cpp = importlib.import_module("llama_cpp")
        except ImportError as exc:
            raise ConfigError(INSTALL_HINT) from exc
        resolved = resolve_model(path)
        if not os.path.isfile(resolved):
            raise ConfigError(f"llamacpp backend needs a GGUF file; {path!r} resolved to {resolved}")
        threads = n_threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None)
        self._llama = llama_cpp.Llama(
            model_path=resolved, n_ctx=n_ctx, n_threads=threads, verbose=False, **llama_kwargs
        )
        self.context_window = n_ctx
        self.name = os.path.basename(resolved).removesuffix(".gguf")
        self.spec = spec or f"llamacpp:{path}"
        self._lock = threading.Lock()

    @property
    def constrains_json(self) -> bool:
        """True when schema requests are decoded under llama.cpp's grammar for the schema."""
        return self.json_mode == "schema"

    def complete(self, req: LLMRequest) -> LLMResponse:
        """Chat completion through the model's own chat template; a JSON schema becomes llama.cpp's
        grammar (``json_mode="schema"``) or an instruction in the prompt."""
        constrained = req.json_schema is not None and self.constrains_json
        messages = [m.to_dict() for m in (req.messages if constrained else with_json_instruction(req))]
        kwargs: dict[str, Any] = {
            "messages": messages,
            "max_tokens": req.max_tokens,
            "temperature": req.temperature,
            "stop": list(req.stop) or None,
        }
        if req.seed is not None:
            kwargs["seed"] = req.seed
        if constrained:
            kwargs["response_format"] = {"type": "json_object", "schema": req.json_schema}
        start = time.perf_counter()
        with self._lock:
            try:
                out = self._llama.create_chat_completion(**kwargs)
            except (RuntimeError, ValueError) as exc:
                raise LLMError(f"{self.spec}: generation failed: {exc}") from exc
        choice = out["choices"][0]
        text, hit = truncate_at_stop(str(choice["message"].get("content") or ""), req.stop)
        usage = out.get("usage") or {}
        return LLMResponse(
            text=text,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            latency_s=time.perf_counter() - start,
            finish_reason="stop" if hit else str(choice.get("finish_reason") or "stop"),
            model=self.name,
            constrained=constrained,
        )
