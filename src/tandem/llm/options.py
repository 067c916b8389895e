"""``--llm-opt KEY=VALUE``: LLM options from the command line, checked against what each backend takes.

Two kinds of keys:

- backend options, passed to the backend's constructor (``json_mode``, ``timeout``, ``max_retries``,
  ``max_concurrency``, ...): the options its settings model declares (:mod:`tandem.llm.settings`,
  ``tandem llms NAME``), less those only Python callers and config files may set (FakeLLM's scripts, an API
  key, ...); ``load_llm`` checks their types;
- generation options that belong to the method's calls: ``temperature`` and ``max_tokens`` -
  ``max_tokens=N`` for single-role methods, ``max_tokens.ROLE=N`` for methods with roles (DualRAG's
  reasoner / entity_identifier / summarizer / answer, CoopRAG's unroll / complete / answer, ...).

Values are read as JSON where they parse (``30``, ``true``, ``{"top_p": 1}``), else kept as strings, so they
have the types the settings models declare (which coerce nothing: ``"true"`` quoted stays a string).
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from tandem.errors import ConfigError
from tandem.llm.backends import parse_spec
from tandem.llm.settings import llm_opt_keys
from tandem.registry import LLMS

GENERATION_OPTIONS = ("temperature", "max_tokens")


def per_role(method: str | None) -> bool:
    """Whether ``method``'s calls have several roles, each with its token budget (``max_tokens.ROLE=N``): its
    settings model declares ``max_tokens`` as a mapping of role to budget."""
    if not method:
        return False
    from tandem.registry import METHODS

    try:
        field = METHODS.get(method).settings.model_fields.get("max_tokens")
    except ConfigError:  # an unknown method is reported where the method is built
        return False
    return field is not None and typing.get_origin(field.annotation) is dict


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
    allowed = llm_opt_keys(LLMS.get(backend).settings)
    backend_opts: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    for key, value in options.items():
        name, _, role = key.partition(".")
        if key in allowed:
            backend_opts[key] = value
        elif key == "temperature":
            settings["temperature"] = float(value)
        elif name == "max_tokens" and (bool(role) == per_role(method)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"--llm-opt {key} needs a positive integer, got {value!r}")
            if role:
                settings.setdefault("max_tokens", {})[role] = value
            else:
                settings["max_tokens"] = value
        else:
            token = "max_tokens.ROLE" if per_role(method) else "max_tokens"
            valid = sorted([*allowed, "temperature", token])
            raise ConfigError(f"unknown --llm-opt {key!r} for the {backend!r} backend"
                              f"{f' and method {method!r}' if method else ''}; valid keys: {valid}")
    return backend_opts, settings
