"""``load_llm(spec, **opts)``: one string picks a backend.

Specs:

- ``local`` or ``local:NAME_OR_GGUF`` - the ladder's default model (``tandem.llm.ladder.default_model``), a
  model of the ladder by name, or another GGUF, in-process.
- ``hf:PATH_OR_NAME`` - any transformers causal LM folder (or a hub name already cached).
- ``openai:MODEL@BASE_URL`` - an OpenAI-compatible server, e.g.
  ``openai:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8000/v1``; without ``@BASE_URL`` the
  ``base_url`` option, then ``$OPENAI_BASE_URL``, then api.openai.com.
- ``llamacpp:PATH`` - a GGUF through llama-cpp-python (optional extra).
- ``fake`` or ``fake:TEXT`` - :class:`tandem.llm.fake.FakeLLM` answering ``TEXT`` to everything
  (options ``responses=``/``rules=`` script it).

Each backend declares its options in a settings model (:mod:`tandem.llm.settings`: type, default, meaning;
``tandem llms NAME`` lists them). ``load_llm`` checks the options against it and passes the backend's
constructor only those given, so the constructor's defaults apply to the rest; ``cache=PATH`` (not a backend
option) wraps the result in :class:`tandem.llm.cache.CachedLLM`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tandem.errors import ConfigError
from tandem.llm.base import LLM
from tandem.llm.settings import FakeSettings, HFSettings, LlamaCppSettings, LocalSettings, OpenAISettings, check_options
from tandem.registry import LLMS


@LLMS.register("local", settings=LocalSettings,
               doc="the ladder's default model (Qwen2.5-Coder-1.5B), local:NAME of the model ladder (tandem llm get NAME), or "
                   "local:GGUF_PATH; in-process")
def _load_local(arg: str, spec: str, opts: dict[str, Any]) -> LLM:
    from tandem.llm.local import load_local

    return load_local(arg or None, spec=spec, **opts)


@LLMS.register("hf", settings=HFSettings, doc="any transformers causal LM folder (or a cached hub name), in-process")
def _load_hf(arg: str, spec: str, opts: dict[str, Any]) -> LLM:
    if not arg:
        raise ConfigError("hf backend needs a model: hf:PATH_OR_NAME")
    from tandem.llm.hf import HFLLM

    return HFLLM(arg, spec=spec, **opts)


@LLMS.register("openai", settings=OpenAISettings, doc="an OpenAI-compatible server: openai:MODEL@BASE_URL")
def _load_openai(arg: str, spec: str, opts: dict[str, Any]) -> LLM:
    from tandem.llm.openai_compat import OpenAILLM

    model, base_url = split_model_url(arg)
    if base_url and opts.get("base_url"):
        raise ConfigError(f"spec {spec!r} gives a base URL; do not pass base_url= as well")
    return OpenAILLM(model, base_url or opts.pop("base_url", None), spec=spec, **opts)


@LLMS.register("llamacpp", settings=LlamaCppSettings, doc="a GGUF through llama-cpp-python (extra llamacpp)")
def _load_llamacpp(arg: str, spec: str, opts: dict[str, Any]) -> LLM:
    from tandem.llm.llamacpp import LlamaCppLLM

    return LlamaCppLLM(arg or "smollm2", spec=spec, **opts)


@LLMS.register("fake", settings=FakeSettings,
               doc="the scripted fake LLM answering TEXT (fake:TEXT), for tests and demos")
def _load_fake(arg: str, spec: str, opts: dict[str, Any]) -> LLM:
    from tandem.llm.fake import FakeLLM

    if arg:
        opts.setdefault("default", arg)
    return FakeLLM(spec=spec, **opts)


def split_model_url(arg: str) -> tuple[str, str | None]:
    """``"MODEL@http://host/v1"`` -> ``("MODEL", "http://host/v1")``; no ``@http`` -> ``(arg, None)``.

    Splits at the first ``@http://`` / ``@https://`` so model names may contain ``@``.
    """
    for marker in ("@http://", "@https://"):
        idx = arg.find(marker)
        if idx >= 0:
            model, url = arg[:idx], arg[idx + 1 :]
            if not model:
                raise ConfigError(f"missing model name before the URL in {arg!r}: openai:MODEL@BASE_URL")
            return model, url
    if "@" in arg:
        raise ConfigError(f"the base URL in {arg!r} must start with http:// or https://")
    if not arg:
        raise ConfigError("openai backend needs a model: openai:MODEL@BASE_URL")
    return arg, None


def parse_spec(spec: str) -> tuple[str, str]:
    """``"backend:arg"`` -> ``(backend, arg)``; raises ConfigError for an unknown backend."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"an LLM spec must be a non-empty string like 'local'; backends: {LLMS.names()}")
    backend, _, arg = spec.strip().partition(":")
    if backend not in LLMS:
        raise ConfigError(f"unknown LLM backend {backend!r} in spec {spec!r}; backends: {LLMS.names()}")
    return backend, arg


def backend_options(spec: str, options: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """``options`` for the backend ``spec`` names, checked against its settings model: only the keys given, with
    their validated values; a ConfigError names a bad key (an unknown one with every valid one)."""
    backend, _ = parse_spec(spec)
    return check_options(LLMS.get(backend).settings, backend, options, where)


def load_llm(spec: str, *, cache: str | Path | None = None, **opts: Any) -> LLM:
    """Build the LLM a spec names (see module doc); ``cache=PATH`` adds the SQLite response cache. Options the
    backend's settings model does not declare, or of the wrong type, are a ConfigError naming the key (an
    unknown one with every valid one)."""
    backend, arg = parse_spec(spec)
    entry = LLMS.get(backend)
    given = backend_options(spec, opts)
    try:
        llm = entry.build(arg, spec.strip(), given)
    except TypeError as exc:  # a backend's constructor refusing what its settings model lets through
        valid = sorted(entry.settings.model_fields)
        raise ConfigError(f"bad option for the {backend!r} LLM backend ({exc}); valid options: {valid}") from exc
    if cache is not None:
        from tandem.llm.cache import CachedLLM

        return CachedLLM(llm, cache)
    return llm
