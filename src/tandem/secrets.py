"""Keep secrets out of everything tandem prints or writes: messages, logs, traces and run files.

:func:`redact` replaces the values of secret-looking environment variables (``*_KEY``, ``*_TOKEN``,
``*_SECRET``, ``*_PASSWORD``; at least 8 characters), values registered with :func:`register_secret`
(the API keys the LLM backends and the server use), bearer tokens and the password of URLs with
``user:password@host`` by ``***``.
"""

from __future__ import annotations

import os
import re

_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$", re.IGNORECASE)
_BEARER = re.compile(r"(Bearer\s+)[A-Za-z0-9._~+/=-]{4,}", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(://[^/\s:@]+:)[^@\s/]+@")
MASK = "***"
_registered: set[str] = set()


def register_secret(value: str | None) -> None:
    """Redact ``value`` everywhere from now on (an API key however it was given); short values are ignored."""
    if value and len(value) >= 8:
        _registered.add(value)


def secret_values() -> list[str]:
    """Registered secrets and values of secret-looking environment variables, longest first."""
    values = {v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= 8} | _registered
    return sorted(values, key=len, reverse=True)


def redact(text: str) -> str:
    """``text`` with every known secret replaced by ``***``."""
    for value in secret_values():
        text = text.replace(value, MASK)
    text = _BEARER.sub(lambda m: m.group(1) + MASK, text)
    return _URL_PASSWORD.sub(lambda m: m.group(1) + MASK + "@", text)
