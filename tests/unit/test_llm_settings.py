"""The LLM backends' settings models (tandem.llm.settings): their defaults are the constructors', load_llm checks
options against them and hands the backend only those given, --llm-opt and config files go through them, and
``tandem llms NAME`` lists them."""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

from tandem.errors import ConfigError
from tandem.llm import fake, load_llm
from tandem.llm.backends import backend_options
from tandem.llm.fake import FakeLLM
from tandem.llm.hf import HFLLM
from tandem.llm.llamacpp import LlamaCppLLM
from tandem.llm.local import OPENVINO_DEFAULTS, load_local
from tandem.llm.openai_compat import OpenAILLM
from tandem.llm.options import parse_pairs, split_llm_options
from tandem.llm.ov_engine import OVLLM
from tandem.llm.settings import llm_opt_keys
from tandem.registry import LLMS

#: each backend's constructor(s), in the order a default is looked up; the local backend's ``**engine_opts`` go to
#: OVLLM, after ``_load`` has set OPENVINO_DEFAULTS' ``kv_cache`` and ``dynamic_quantization`` where not given
CONSTRUCTORS: dict[str, tuple[Any, ...]] = {"local": (load_local, OPENVINO_DEFAULTS, OVLLM), "hf": (HFLLM,),
                                            "openai": (OpenAILLM,), "llamacpp": (LlamaCppLLM,), "fake": (FakeLLM,)}
#: constructor parameters that are not options: the spec's own parts and what the builders pass themselves
NOT_OPTIONS = {"model", "path", "spec", "model_dir", "torch_dir", "weights_dir", "name", "self"}
#: options a constructor forwards without declaring them (llamacpp: to llama_cpp.Llama), unset by default
PASSED_THROUGH = {"llamacpp": {"use_extra_bufts"}}
#: what --llm-opt took before the settings models (the backends' ``takes=``): unchanged
LLM_OPT_KEYS = {
    "local": {"json_mode", "num_threads", "dtype", "engine", "weights", "max_batch", "kv_cache_gb", "step_tokens",
              "kv_cache", "dynamic_quantization", "relax_strings", "prompt_lookup", "engine_process", "answer_style"},
    "hf": {"json_mode", "num_threads", "dtype", "trust_remote_code"},
    "openai": {"json_mode", "timeout", "connect_timeout", "max_retries", "connect_retries", "timeout_retries",
               "backoff_base", "backoff_max", "max_concurrency", "api_key_env", "extra_body", "context_window"},
    "llamacpp": {"json_mode", "n_ctx", "n_threads", "use_extra_bufts"},
    "fake": {"constrains_json", "context_window"},
}


def keyword_defaults(constructor: Any) -> dict[str, Any]:
    """A constructor's keyword parameters and their defaults (a dict of defaults is taken as it is)."""
    if isinstance(constructor, dict):
        return dict(constructor)
    return {p.name: p.default for p in inspect.signature(constructor).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.default is not p.empty}


@pytest.mark.parametrize("backend", sorted(CONSTRUCTORS))
def test_each_option_s_default_is_the_constructor_s(backend):
    model = LLMS.get(backend).settings
    found: dict[str, Any] = {}
    for constructor in CONSTRUCTORS[backend]:
        for name, default in keyword_defaults(constructor).items():
            found.setdefault(name, default)
    for name, info in model.model_fields.items():
        if name in PASSED_THROUGH.get(backend, ()):
            assert info.default is None, name  # unset: the library's own default
            continue
        assert name in found, f"{backend}: option {name!r} is no parameter of its constructor"
        assert info.default == found[name], f"{backend}: {name} defaults to {info.default!r}, the constructor to {found[name]!r}"
    params = {n for c in CONSTRUCTORS[backend] if not isinstance(c, dict) for n in keyword_defaults(c)} - NOT_OPTIONS
    assert params <= set(model.model_fields), f"{backend}: parameters without an option: {params - set(model.model_fields)}"


def test_the_llm_opt_keys_are_what_they_were():
    assert {b: set(llm_opt_keys(LLMS.get(b).settings)) for b in LLM_OPT_KEYS} == LLM_OPT_KEYS


def test_the_backend_gets_only_the_options_given(monkeypatch):
    seen: list[dict[str, Any]] = []

    class Recorder(FakeLLM):
        def __init__(self, **kwargs: Any) -> None:
            seen.append(kwargs)
            super().__init__(**kwargs)

    monkeypatch.setattr(fake, "FakeLLM", Recorder)
    load_llm("fake")
    pattern, answer = re.compile("hop \\d"), ValueError("boom")
    llm = load_llm("fake:hi", rules=[(pattern, answer)], constrains_json=True)
    assert seen[0] == {"spec": "fake"}
    assert seen[1] == {"spec": "fake:hi", "rules": [(pattern, answer)], "constrains_json": True, "default": "hi"}
    assert llm.rules[0][0] is pattern and llm.rules[0][1] is answer  # Python objects go through as they are


def test_a_bad_option_names_the_key():
    with pytest.raises(ConfigError, match=r"bad option for the 'openai' LLM backend: unknown option 'timeoutt'; "
                                          r"valid options: \['api_key', 'api_key_env', 'backoff_base'"):
        load_llm("openai:m@http://127.0.0.1:9/v1", timeoutt=3)
    with pytest.raises(ConfigError, match="timeout is a number, got 'soon'"):
        load_llm("openai:m@http://127.0.0.1:9/v1", timeout="soon")
    with pytest.raises(ConfigError, match="max_concurrency must be >= 1, got 0"):
        load_llm("openai:m@http://127.0.0.1:9/v1", max_concurrency=0)
    with pytest.raises(ConfigError, match="unknown engine 'tpu'; expected 'auto', 'openvino' or 'torch'"):
        load_llm("local", engine="tpu")
    with pytest.raises(ConfigError, match="engine_process is true or false, got 'yes'"):
        load_llm("local", engine_process="yes")  # strict: not coerced
    with pytest.raises(ConfigError, match="constrains_json is true or false, got 'true'"):
        load_llm("fake", constrains_json="true")


def test_llm_opt_strings_parse_to_the_declared_types():
    pairs = parse_pairs(["timeout=30", "max_retries=0", "json_mode=schema", 'extra_body={"top_p": 1.0}',
                         "api_key_env=MY_KEY"])
    opts, _ = split_llm_options("openai:m@http://127.0.0.1:9/v1", pairs)
    checked = backend_options("openai:m@http://127.0.0.1:9/v1", opts)
    assert checked == {"timeout": 30.0, "max_retries": 0, "json_mode": "schema", "extra_body": {"top_p": 1.0},
                       "api_key_env": "MY_KEY"}
    llm = load_llm("openai:m@http://127.0.0.1:9/v1", **opts)
    assert llm.retries["http"] == 0 and llm.extra_body == {"top_p": 1.0}
    opts, _ = split_llm_options("local", parse_pairs(["engine_process=false", "max_batch=4", "dynamic_quantization=null"]))
    assert backend_options("local", opts) == {"engine_process": False, "max_batch": 4, "dynamic_quantization": None}
    with pytest.raises(ConfigError, match="unknown --llm-opt 'responses'"):
        split_llm_options("fake", parse_pairs(['responses=["a"]']))  # a script: Python and config files only


def test_a_config_file_s_llm_options_are_checked():
    from tandem.config import LLMConfig

    assert LLMConfig.from_dict({"spec": "fake:x", "options": {"responses": ["a"], "context_window": 8}}).options == {
        "responses": ["a"], "context_window": 8}
    with pytest.raises(ConfigError, match="llm.options: bad option for the 'fake' LLM backend: unknown option "
                                          "'constrains_jsn'"):
        LLMConfig.from_dict({"spec": "fake:x", "options": {"constrains_jsn": True}})
    with pytest.raises(ConfigError, match="context_window is a whole number, got '8k'"):
        LLMConfig.from_dict({"spec": "fake:x", "options": {"context_window": "8k"}})


def test_llamacpp_passes_other_keys_to_llama_cpp():
    assert backend_options("llamacpp:x", {"n_gpu_layers": 0, "n_ctx": 512}) == {"n_ctx": 512, "n_gpu_layers": 0}
    with pytest.raises(ConfigError, match="n_ctx is a whole number"):
        backend_options("llamacpp:x", {"n_ctx": "big"})


def test_the_listing_names_its_command_and_shows_each_option(capsys):
    from tandem.cli.components import show

    show(LLMS, None, False, "--llm-opt")
    out = " ".join(capsys.readouterr().out.split())
    assert "tandem llms NAME: its settings" in out and "LLM-backends" not in out
    show(LLMS, "openai", False, "--llm-opt")
    out = " ".join(capsys.readouterr().out.split())
    assert "backend option" not in out
    assert re.search(r"max_retries\s*│\s*int\s*│\s*3\s*│\s*retries of 429", out), out
