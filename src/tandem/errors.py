"""Error hierarchy shared by every stage; the CLI and the HTTP server map these to messages."""

from __future__ import annotations


class TandemError(Exception):
    """Base class of every error tandem raises on purpose."""


class ConfigError(TandemError):
    """A setting is missing, unknown or invalid."""


class DataError(TandemError):
    """Input data is malformed. Carries the file and line where there is one."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(f"{where}{message}")
        self.path = path
        self.line = line
        self.reason = message


class ModelNotFoundError(TandemError):
    """A model (embedded or by path/name) could not be located offline."""


class IndexError_(TandemError):
    """An index folder is missing, incomplete or unreadable."""


class IndexMismatchError(TandemError):
    """An index was built with a different encoder or over a different corpus than requested."""


class LLMError(TandemError):
    """An LLM backend failed after its retries."""


class ParseError(TandemError):
    """An LLM output could not be parsed into the expected structure."""

    def __init__(self, message: str, raw: str = "") -> None:
        super().__init__(message)
        self.raw = raw
