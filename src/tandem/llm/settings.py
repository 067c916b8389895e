"""The LLM backends' settings models: every option a backend's constructor takes, with its type, default and
meaning, declared once. ``load_llm`` validates the options against them (:func:`check_options`), ``--llm-opt``
takes their keys (:func:`llm_opt_keys`), ``tandem llms NAME`` and the docs' tables list them.

Types are strict: a value is taken as it is given (``--llm-opt`` values are JSON-parsed first, config files
are YAML or JSON), never coerced - ``"yes"`` is not a flag, ``"8"`` not a number. Only the options a caller
set reach the backend, so a default here is documentation: ``tests/unit/test_llm_settings.py`` holds each one
to the constructor's. Options that are not simple values (FakeLLM's scripts, an ``httpx`` transport) or that
do not belong on a command line (an API key) are typed ``Any`` or marked with :func:`not_llm_opt`: Python
callers and config files may set them, ``--llm-opt`` may not.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError

from tandem.errors import ConfigError
from tandem.settings import Settings

JsonMode = Literal["schema", "prompt"]
Precision = Literal["float32", "bfloat16", "float16"]
#: the brief answer prompt's styles (:func:`tandem.methods.answers.brief_answer_messages`)
AnswerStyle = Literal["instruction", "instruction_yes_no", "system"]
#: the phrase a wrong type gets in an error: ``step_tokens is a whole number, got 'lots'``
TYPE_PHRASES = {"int_type": "is a whole number", "bool_type": "is true or false", "float_type": "is a number",
                "string_type": "is a string", "dict_type": "is a mapping", "none_required": "is null"}


def not_llm_opt(description: str) -> dict[str, Any]:
    """``Field`` arguments of an option Python callers and config files may set but ``--llm-opt`` may not."""
    return {"description": f"{description} (Python and config files only, not --llm-opt)",
            "json_schema_extra": {"llm_opt": False}}


class BackendSettings(Settings):
    """The base of an LLM backend's options: strict types (values are taken as given, not coerced)."""

    model_config = ConfigDict(strict=True)


class LocalSettings(BackendSettings):
    """Options of the ``local`` backend (:func:`tandem.llm.local.load_local`; the openvino engine's are
    :class:`tandem.llm.ov_engine.OVLLM`'s)."""

    engine: Literal["auto", "openvino", "torch"] = Field(
        "auto", description="auto: openvino where it and its exporter are installed, else torch (with a warning)")
    weights: Literal["fp16", "int8", "int4", "q4_1", "gguf"] | None = Field(
        None, description="the openvino engine's weights; null: the GGUF's own Q4_1 blocks (q4_1) where it has "
                          "them, else gguf (OpenVINO reads the GGUF itself)")
    dtype: Precision | None = Field(None, description="compute precision; null: the ladder model's fast settings "
                                                      "for this kind of CPU (amx, avx512_bf16, other: those that "
                                                      "passed the answers rule), else float32")
    num_threads: int | None = Field(None, description="CPU threads; null or 0: $TANDEM_LLM_THREADS, else the "
                                                      "idle CPUs (openvino) or torch's default (torch)")
    json_mode: JsonMode = Field("schema", description="schema: replies to a JSON schema are decoded under it "
                                                      "(a grammar); prompt: the schema is only an instruction")
    answer_style: AnswerStyle | None = Field(
        None, description="the answer prompt's style; null: the one the model's ladder entry was checked with")
    max_batch: int = Field(16, ge=1, description="openvino: sequences decoded together at most")
    kv_cache_gb: int = Field(1, ge=1, description="openvino: memory for the KV cache blocks, in GB")
    step_tokens: int = Field(512, ge=1, description="openvino: tokens one engine step computes at most "
                                                    "(>= max_batch); a long prompt is prefilled in chunks of this")
    kv_cache: Literal["u8", "float16", "bfloat16", "float32"] = Field(
        "float32", description="openvino: KV cache precision; unset: float32 under dtype float32 (the "
                               "default), else u8")
    dynamic_quantization: int | None = Field(
        0, description="openvino: group size (>= 0) of the dynamic int8 quantization of activations in "
                       "matmuls with compressed weights; 0: off; null: the CPU plugin's own (on)")
    relax_strings: bool = Field(True, description="openvino: decode long JSON strings without their bounds and "
                                                  "continue at a bound (same replies, faster)")
    prompt_lookup: int = Field(0, ge=0, description="openvino: prompt-lookup decoding, up to this many tokens a "
                                                     "step drafted by copying from the prompt and checked in one "
                                                     "pass; 0: off; unset with dtype unset: the ladder model's "
                                                     "fast settings' (docs/faster-arithmetic.md)")
    engine_process: bool = Field(False, description="openvino: step the engine in a process of its own (what "
                                                    "tandem serve and tandem mcp ask for)")
    cache_dir: str | Path | None = Field(None, **not_llm_opt("where converted models are kept; null: tandem's "
                                                             "cache root"))


class HFSettings(BackendSettings):
    """Options of the ``hf`` backend (:class:`tandem.llm.hf.HFLLM`)."""

    dtype: Precision = Field("float32", description="compute precision")
    num_threads: int | None = Field(None, description="torch threads; null or 0: $TANDEM_LLM_THREADS, else "
                                                      "torch's default capped at the CPUs available")
    json_mode: JsonMode = Field("schema", description="schema: replies to a JSON schema are decoded under it "
                                                      "(a grammar); prompt: the schema is only an instruction")
    trust_remote_code: bool = Field(False, description="let transformers run the model folder's own code")
    name: str | None = Field(None, **not_llm_opt("the model's name in traces; null: the folder's name"))


class OpenAISettings(BackendSettings):
    """Options of the ``openai`` backend (:class:`tandem.llm.openai_compat.OpenAILLM`)."""

    json_mode: Literal["auto", "prompt", "schema", "object"] = Field(
        "auto", description="how a JSON schema is sent: auto (from the server's GET /models), prompt "
                            "(instruction only), schema (response_format json_schema), object (json_object)")
    timeout: float = Field(60.0, gt=0, description="seconds for the whole response, per attempt")
    connect_timeout: float = Field(5.0, gt=0, description="seconds to connect, per attempt")
    max_retries: int = Field(3, ge=0, description="retries of 429 / 5xx / unreadable replies after the first "
                                                  "attempt")
    connect_retries: int = Field(1, ge=0, description="retries of a refused or failed connection")
    timeout_retries: int = Field(1, ge=0, description="retries of a timed-out request")
    backoff_base: float = Field(0.5, ge=0, description="seconds before the first retry; doubles each retry, "
                                                       "plus up to 50 % jitter")
    backoff_max: float = Field(30.0, ge=0, description="the most seconds between retries (a 429's Retry-After "
                                                       "is honoured up to it)")
    max_concurrency: int = Field(8, ge=1, description="requests in flight at once from this client (others "
                                                          "wait; also the connection pool's size)")
    api_key_env: str = Field("OPENAI_API_KEY", description="the environment variable the API key is read from "
                                                           "(local servers need none)")
    extra_body: dict[str, Any] | None = Field(None, description="merged into every request body, e.g. "
                                                                '{"top_p": 1.0}')
    context_window: int | None = Field(None, ge=1, description="the model's context in tokens; null: the "
                                                               "server's max_model_len, else 32768")
    base_url: str | None = Field(None, **not_llm_opt("the server's URL when the spec has no @BASE_URL; null: "
                                                     "$OPENAI_BASE_URL, else api.openai.com"))
    api_key: str | None = Field(None, **not_llm_opt("the API key itself; null: read from api_key_env"))
    transport: Any = Field(None, **not_llm_opt("an httpx transport for the client (tests)"))


class LlamaCppSettings(BackendSettings):
    """Options of the ``llamacpp`` backend (:class:`tandem.llm.llamacpp.LlamaCppLLM`); other keys go to
    ``llama_cpp.Llama`` as they are (its own options: ``n_gpu_layers``, ``seed``, ...; from Python and config
    files only), so they are not checked here."""

    model_config = ConfigDict(extra="allow")

    n_ctx: int = Field(4096, ge=1, description="context window in tokens")
    n_threads: int | None = Field(None, description="CPU threads; null or 0: the CPUs available")
    json_mode: JsonMode = Field("schema", description="schema: replies to a JSON schema are decoded under "
                                                      "llama.cpp's grammar; prompt: the schema is only an "
                                                      "instruction")
    use_extra_bufts: bool | None = Field(None, description="passed to llama_cpp.Llama: false where the CPU "
                                                           "advertises AMX but refuses it; null: llama_cpp's "
                                                           "default")


class FakeSettings(BackendSettings):
    """Options of the ``fake`` backend (:class:`tandem.llm.fake.FakeLLM`): its scripts are Python objects."""

    constrains_json: bool = Field(False, description="report that replies to schema requests were decoded "
                                                     "under the schema, as a grammar-decoding backend does")
    context_window: int | None = Field(None, ge=1, description="the context in tokens it reports; null: none")
    responses: Any = Field((), **not_llm_opt("answers replayed in call order"))
    rules: Any = Field((), **not_llm_opt("(pattern, answer) pairs: the first whose pattern matches answers"))
    default: Any = Field(None, **not_llm_opt("the answer when no rule matches and the queue is empty (fake:TEXT "
                                             "sets it)"))
    match: Literal["last_user", "prompt"] = Field("last_user", **not_llm_opt("what rules are matched against"))
    name: str = Field("fake", **not_llm_opt("the model's name in traces"))
    batches: bool = Field(False, **not_llm_opt("report that concurrent requests are computed together"))
    tells_first_tokens: bool = Field(False, **not_llm_opt("report that it answers first_tokens requests (scripted "
                                                          "as LLMResponse objects with first_tokens)"))


def llm_opt_keys(model: type[Settings]) -> list[str]:
    """The options of ``model`` that ``--llm-opt KEY=VALUE`` may set (those not marked :func:`not_llm_opt`)."""
    return [name for name, info in model.model_fields.items()
            if not (isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get("llm_opt") is False)]


def check_options(model: type[Settings], backend: str, options: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """``options`` validated against ``model``: only the keys given, with their validated values (an ``Any``
    option is the very object given). A ConfigError names the bad key - an unknown one with every valid one."""
    try:
        checked = model.model_validate(dict(options))
    except ValidationError as exc:
        raise ConfigError(f"{where + ': ' if where else ''}bad option for the {backend!r} LLM backend: "
                          f"{problems(model, exc, options)}") from None
    given = {name: getattr(checked, name) for name in model.model_fields if name in checked.model_fields_set}
    return {**given, **(checked.model_extra or {})}


def problems(model: type[Settings], exc: ValidationError, options: Mapping[str, Any]) -> str:
    """One phrase per bad key of ``exc`` (``step_tokens is a whole number, got 'lots'``); an unknown key's
    lists every option of ``model``."""
    seen: dict[str, str] = {}
    for err in exc.errors():
        key = str(err["loc"][0]) if err["loc"] else "(options)"
        if key in seen:  # a union's members each report; the first says enough
            continue
        value = options.get(key)
        kind, ctx = err["type"], err.get("ctx") or {}
        if kind == "extra_forbidden":
            seen[key] = f"unknown option {key!r}; valid options: {sorted(model.model_fields)}"
        elif kind == "literal_error":
            seen[key] = f"unknown {key} {value!r}; expected {ctx.get('expected')}"
        elif kind in TYPE_PHRASES:
            seen[key] = f"{key} {TYPE_PHRASES[kind]}, got {value!r}"
        elif kind in ("greater_than_equal", "greater_than"):
            bound = ">=" if kind == "greater_than_equal" else ">"
            seen[key] = f"{key} must be {bound} {ctx.get('ge', ctx.get('gt')):g}, got {value!r}"
        else:
            seen[key] = f"{key}: {err['msg']} (got {value!r})"
    return "; ".join(seen.values())


__all__ = ["BackendSettings", "FakeSettings", "HFSettings", "LlamaCppSettings", "LocalSettings", "OpenAISettings",
           "check_options", "llm_opt_keys", "not_llm_opt"]
