"""Error hierarchy shared by every stage; the CLI and the HTTP server map these to messages."""

from __future__ import annotations


class TandemError(Exception):
    """Base class of every error tandem raises on purpose. ``exit_code``: what the CLI exits with
    (2: bad input or settings; :class:`RunError` 1: the work itself failed)."""

    exit_code = 2


class ConfigError(TandemError):
    """A setting is missing, unknown or invalid."""


class NotFound(ConfigError):
    """A name a request gives (an index, a job, a model) names nothing there (HTTP 404)."""


class Conflict(ConfigError):
    """The request conflicts with work under way (an index being built under that name; HTTP 409)."""


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


class DuplicateIdError(DataError):
    """Two documents of a corpus share an id; ``rows``: their rows in index order (the caller that
    knows the corpus file names the lines: :func:`tandem.corpus.loaders.corpus_lines`)."""

    def __init__(self, message: str, doc_id: str, rows: tuple[int, int], path: str | None = None,
                 line: int | None = None) -> None:
        super().__init__(message, path, line)
        self.doc_id, self.rows = doc_id, rows


class ModelNotFoundError(TandemError):
    """A model (embedded or by path/name) could not be located offline."""


class IndexError_(TandemError):
    """An index folder is missing, incomplete or unreadable."""


class DamagedError(TandemError):
    """A file tandem wrote (an index component, a checkpoint, a run's record) is missing, truncated,
    altered or unreadable. The message names the file and the fix (rebuild, retrain, ...)."""


class WriteError(TandemError):
    """Writing failed for a reason outside the input: the disk is full, the target is read-only or not
    writable. Names the path and what was being written; nothing half-written is left in place.
    The CLI exits 1 (the work failed; the input was not at fault)."""

    exit_code = 1


class IndexMismatchError(TandemError):
    """An index was built with a different encoder or over a different corpus than requested."""


class LLMError(TandemError):
    """An LLM backend failed after its retries. ``kind``: ``connect`` / ``timeout`` (the server cannot be
    reached), ``http`` (an error status), ``reply`` (an unreadable or malformed reply), or None. The
    CLI exits 1: the work failed, the input was not at fault."""

    exit_code = 1

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind

    @property
    def unreachable(self) -> bool:
        """True when the server could not be reached at all (a run stops after several in a row)."""
        return self.kind in ("connect", "timeout")


class RunError(TandemError):
    """The work failed as a whole: every question errored, or a run stopped early on a dead server."""

    exit_code = 1


class ParseError(TandemError):
    """An LLM output could not be parsed into the expected structure."""

    def __init__(self, message: str, raw: str = "") -> None:
        super().__init__(message)
        self.raw = raw


class Cancelled(TandemError):
    """The work for a question was cancelled (e.g. its HTTP client went away)."""
