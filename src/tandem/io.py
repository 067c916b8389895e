"""File helpers: strict JSON/JSONL reading with file:line errors, and atomic writes."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tandem.errors import DataError


@dataclass
class ReadStats:
    """What a lenient read skipped, so the caller can report it."""

    skipped: int = 0
    first_error: str | None = None

    def skip_or_raise(self, error: DataError, skip_bad: bool) -> None:
        """Raise ``error`` unless bad records are being skipped; then count it."""
        if not skip_bad:
            raise error
        self.skipped += 1
        if self.first_error is None:
            self.first_error = str(error)


def _open_bytes(path: Path) -> IO[bytes]:
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")


def read_jsonl(path: str | Path, *, skip_bad: bool = False, stats: ReadStats | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) from a JSONL file (optionally .gz).

    A line that is not UTF-8, not JSON or not an object raises DataError naming file:line;
    with ``skip_bad`` it is skipped and counted in ``stats`` instead. Blank lines are ignored.
    """
    path = Path(path)
    stats = stats if stats is not None else ReadStats()
    try:
        handle = _open_bytes(path)
    except OSError as exc:
        raise DataError(f"cannot open: {exc.strerror}", str(path)) from exc
    with handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                stats.skip_or_raise(DataError(f"not valid UTF-8 (byte {exc.start} of the line)", str(path), line_no), skip_bad)
                continue
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                stats.skip_or_raise(DataError(f"malformed JSON ({exc.msg} at column {exc.colno})", str(path), line_no), skip_bad)
                continue
            if not isinstance(obj, dict):
                stats.skip_or_raise(DataError(f"expected a JSON object, got {type(obj).__name__}", str(path), line_no), skip_bad)
                continue
            yield line_no, obj


def read_json_records(path: str | Path, *, skip_bad: bool = False,
                      stats: ReadStats | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based record index, object) from a file holding one JSON array of objects; a record
    that is not an object raises DataError, or is skipped and counted in ``stats`` with ``skip_bad``."""
    stats = stats if stats is not None else ReadStats()
    path = Path(path)
    try:
        with _open_bytes(path) as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise DataError(f"not valid UTF-8 (byte {exc.start})", str(path)) from exc
    except json.JSONDecodeError as exc:
        raise DataError(f"malformed JSON ({exc.msg})", str(path), exc.lineno) from exc
    if not isinstance(data, list):
        raise DataError("expected a JSON array of records", str(path))
    for i, obj in enumerate(data, start=1):
        if not isinstance(obj, dict):
            stats.skip_or_raise(DataError(f"record {i} is {type(obj).__name__}, expected an object", str(path)), skip_bad)
            continue
        yield i, obj


def is_json_array_file(path: Path) -> bool:
    """True if the file's first non-space byte opens a JSON array."""
    with _open_bytes(path) as handle:
        head = handle.read(4096).lstrip()
    return head.startswith(b"[")


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Write to a temp file beside ``path`` and rename it into place only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=encoding if "b" not in mode else None) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write one JSON document atomically."""
    with atomic_open(path) as handle:
        json.dump(obj, handle, indent=2, ensure_ascii=False)
        handle.write("\n")


def write_jsonl_atomic(path: str | Path, records: Iterable[dict[str, Any]]) -> int:
    """Write records as JSONL atomically; returns the count."""
    n = 0
    with atomic_open(path) as handle:
        for rec in records:
            handle.write(json.dumps(rec, ensure_ascii=False) + "\n")
            n += 1
    return n
