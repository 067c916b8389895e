"""``--llm-opt KEY=VALUE``: LLM options from the command line, checked against what each backend takes.

Two kinds of keys:

- backend options, passed to the backend's constructor (``json_mode``, ``timeout``, ``max_retries``,
  ``max_concurrency``, ...; :data:`BACKEND_OPTIONS` lists them per backend);
- generation options that belong to the method's calls: ``temperature`` and ``max_tokens`` -
  ``max_tokens=N`` for single-role methods, ``max_tokens.ROLE=N`` for methods with roles (DualRAG's
  reasoner / entity_identifier / summarizer / answer, CoopRAG's unroll / complete / answer, ...).

Values are read as JSON where they parse (``30``, ``true``), else kept as strings.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from tandem.errors import ConfigError
from tandem.llm.registry import parse_spec

_IN_PROCESS = ("json_mode", "num_threads", "dtype")
BACKEND_OPTIONS: dict[str, tuple[str, ...]] = {
    "local": (*_IN_PROCESS, "engine", "weights", "max_batch", "kv_cache_gb"),
    "hf": (*_IN_PROCESS, "trust_remote_code"),
    "openai": ("json_mode", "timeout", "connect_timeout", "max_retries", "connect_retries", "timeout_retries",
               "backoff_base", "backoff_max",
               "max_concurrency", "api_key_env", "extra_body", "context_window"),
    "llamacpp": ("json_mode", "n_ctx", "n_threads", "use_extra_bufts"),
    "fake": ("constrains_json", "context_window"),
}
GENERATION_OPTIONS = ("temperature", "max_tokens")
# methods whose calls have several roles take max_tokens per role (max_tokens.ROLE=N)
ROLE_METHODS = ("dualrag", "cooprag")


def parse_pairs(items: Iterable[str], flag: str = "--llm-opt") -> dict[str, Any]:
    """``KEY=VALUE`` strings -> dict; values parsed as JSON where they parse."""
    pairs: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag} expects KEY=VALUE, got {item!r}")
        try:
            pairs[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            pairs[key.strip()] = value
    return pairs


def split_llm_options(spec: str, options: Mapping[str, Any], method: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``options`` into (backend constructor options, method settings) for ``spec`` and ``method``.

    Unknown keys raise ConfigError naming every valid key.
    """
    backend, _ = parse_spec(spec)
    allowed = BACKEND_OPTIONS[backend]
    backend_opts: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    for key, value in options.items():
        name, _, role = key.partition(".")
        if key in allowed:
            backend_opts[key] = value
        elif key == "temperature":
            settings["temperature"] = float(value)
        elif name == "max_tokens" and (bool(role) == (method in ROLE_METHODS)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"--llm-opt {key} needs a positive integer, got {value!r}")
            if role:
                settings.setdefault("max_tokens", {})[role] = value
            else:
                settings["max_tokens"] = value
        else:
            token = "max_tokens.ROLE" if method in ROLE_METHODS else "max_tokens"
            valid = sorted([*allowed, "temperature", token])
            raise ConfigError(f"unknown --llm-opt {key!r} for the {backend!r} backend"
                              f"{f' and method {method!r}' if method else ''}; valid keys: {valid}")
    return backend_opts, settings
