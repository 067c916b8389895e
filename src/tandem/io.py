"""File helpers: strict JSON/JSONL reading with file:line errors, and atomic writes."""

from __future__ import annotations

import codecs
import contextlib
import errno
import gzip
import json
import os
import shutil
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tandem.errors import ConfigError, DataError, WriteError


@dataclass
class ReadStats:
    """What a lenient read skipped, so the caller can report it."""

    skipped: int = 0
    first_error: str | None = None
    #: what the read left alone on purpose (a folder's files of other kinds), one line each
    notes: list[str] = field(default_factory=list)

    def skip_or_raise(self, error: DataError, skip_bad: bool) -> None:
        """Raise ``error`` unless bad records are being skipped; then count it."""
        if not skip_bad:
            raise error
        self.skipped += 1
        if self.first_error is None:
            self.first_error = str(error)


def open_bytes(path: Path) -> IO[bytes]:
    """Open a file for reading bytes, gunzipping a `.gz` one."""
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")


@contextlib.contextmanager
def unpacking(path: Path) -> Iterator[None]:
    """Around reads of :func:`open_bytes`: a `.gz` file that is not gzip, or is cut short, is a DataError."""
    try:
        yield
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise DataError(f"not a readable gzip file ({exc})", str(path)) from exc


#: What ``json.loads`` raises for a malformed document: a syntax error, or nesting too deep to parse.
JSON_ERRORS = (json.JSONDecodeError, RecursionError)
#: How a user's text file is decoded: UTF-8, a leading byte-order mark (as Windows editors write one) dropped.
UTF8_BOM = "utf-8-sig"


def lone_surrogate(raw: str, obj: Any) -> bool:
    """Whether the parsed ``obj`` of the JSON text ``raw`` holds a lone UTF-16 surrogate (``"\\ud800"``
    escaped in valid JSON, but no character: it cannot be written or hashed as UTF-8). Only texts
    with such an escape are checked in full."""
    if "\\ud" not in raw and "\\uD" not in raw:
        return False
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


SURROGATE = "a \\uD800-\\uDFFF escape that is not half of a pair (not a character)"


def check_text(what: str, text: str, limit: int | None = None) -> None:
    """A question or query from a user: at most ``limit`` characters, and text - no lone UTF-16 surrogate (JSON
    can escape one, and a command-line argument that is not UTF-8 decodes to some, but UTF-8 and the tokenizers
    cannot hold them); else a ConfigError naming the problem."""
    if limit is not None and len(text) > limit:
        raise ConfigError(f"the {what} has {len(text)} characters; the limit is {limit}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"the {what} is not valid text: it holds {SURROGATE} (not UTF-8?)") from None


def json_problem(exc: Exception) -> str:
    """The message for one of :data:`JSON_ERRORS`."""
    if isinstance(exc, json.JSONDecodeError):
        return f"malformed JSON ({exc.msg} at column {exc.colno})"
    return "malformed JSON (nested too deeply to read)"


def decode_line(raw: bytes, line_no: int, path: Path) -> str:
    """One line of a user's text file as text (a byte-order mark may open line 1 only); a byte that is not UTF-8
    is a DataError naming the file, the line and the byte."""
    try:
        return raw.decode(UTF8_BOM if line_no == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"not valid UTF-8 (byte {exc.start} of the line)", str(path), line_no) from exc


def read_jsonl(path: str | Path, *, skip_bad: bool = False, stats: ReadStats | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) from a JSONL file (optionally .gz).

    A line that is not UTF-8, not JSON or not an object raises DataError naming file:line;
    with ``skip_bad`` it is skipped and counted in ``stats`` instead. Blank lines are ignored.
    """
    path = Path(path)
    stats = stats if stats is not None else ReadStats()
    try:
        handle = open_bytes(path)
    except OSError as exc:
        raise DataError(f"cannot open: {exc.strerror}", str(path)) from exc
    with handle, unpacking(path):
        for line_no, raw in enumerate(handle, start=1):
            try:
                text = decode_line(raw, line_no, path)
            except DataError as exc:
                stats.skip_or_raise(exc, skip_bad)
                continue
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except JSON_ERRORS as exc:
                stats.skip_or_raise(DataError(json_problem(exc), str(path), line_no), skip_bad)
                continue
            if not isinstance(obj, dict):
                stats.skip_or_raise(DataError(f"expected a JSON object, got {type(obj).__name__}", str(path), line_no), skip_bad)
                continue
            if lone_surrogate(text, obj):
                stats.skip_or_raise(DataError(f"malformed text: {SURROGATE}", str(path), line_no), skip_bad)
                continue
            yield line_no, obj


def read_json_records(path: str | Path, *, skip_bad: bool = False,
                      stats: ReadStats | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based record index, object) from a file holding one JSON array of objects; a record
    that is not an object raises DataError, or is skipped and counted in ``stats`` with ``skip_bad``."""
    stats = stats if stats is not None else ReadStats()
    path = Path(path)
    try:
        with open_bytes(path) as handle, unpacking(path):
            text = handle.read().decode(UTF8_BOM)
        data = json.loads(text)
    except OSError as exc:
        raise DataError(f"cannot open: {exc.strerror}", str(path)) from exc
    except UnicodeDecodeError as exc:
        raise DataError(f"not valid UTF-8 (byte {exc.start})", str(path)) from exc
    except JSON_ERRORS as exc:
        raise DataError(json_problem(exc), str(path), getattr(exc, "lineno", None)) from exc
    if not isinstance(data, list):
        raise DataError("expected a JSON array of records", str(path))
    if lone_surrogate(text, data):
        raise DataError(f"malformed text: {SURROGATE}", str(path))
    for i, obj in enumerate(data, start=1):
        if not isinstance(obj, dict):
            stats.skip_or_raise(DataError(f"record {i} is {type(obj).__name__}, expected an object", str(path)), skip_bad)
            continue
        yield i, obj


def is_json_array_file(path: Path) -> bool:
    """True if the file's first non-space byte opens a JSON array."""
    with open_bytes(path) as handle, unpacking(path):
        head = handle.read(4096).removeprefix(codecs.BOM_UTF8).lstrip()
    return head.startswith(b"[")


#: Write failures that are the machine's, not tandem's or the input's: disk full, quota, read-only, no permission.
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG})


def write_error(exc: OSError, target: Path | str, what: str = "") -> WriteError | None:
    """The :class:`WriteError` for an OSError of :data:`WRITE_ERRNOS` met while writing ``target``
    (``what``: what it is, e.g. "index"), naming the file the system refused; None for other errors."""
    if exc.errno not in WRITE_ERRNOS:
        return None
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(target) else ""
    return WriteError(f"cannot write {what + ' ' if what else ''}{target}: {exc.strerror}{where}")


#: ``place(tmp, target)``: puts a finished temp file or folder at its target.
Place = Callable[[Path, Path], None]


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _make_temp(target: Path, folder: bool, suffix: str | None, tmp_name: str | None) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    if tmp_name is not None:
        tmp = target.parent / tmp_name
        if folder:
            tmp.mkdir()
        else:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        return tmp
    prefix = f".{target.name}."
    if folder:
        return Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix or "", dir=target.parent))
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=".tmp" if suffix is None else suffix, dir=target.parent)
    os.close(fd)
    return Path(name)


@contextlib.contextmanager
def atomic_path(target: str | Path, *, folder: bool = False, suffix: str | None = None, tmp_name: str | None = None,
                place: Place = os.replace) -> Iterator[Path]:
    """Yield a temp path beside ``target`` to write into; when the block succeeds ``place(tmp, target)``
    puts it into place (default: ``os.replace``), and if anything raises, the temp file or folder is
    removed, so readers see the old ``target`` or the new one, never a half-written one. A full disk or
    a read-only or unwritable target (:data:`WRITE_ERRNOS`) is a :class:`WriteError` naming ``target``.

    The one "write to a temp path, then rename" of tandem: files (``folder=False``: the temp file exists,
    empty) and folders (``folder=True``: an empty temp folder). ``tmp_name`` fixes the temp's name (it
    must not exist); otherwise it is ``.<name>.<random><suffix>`` (``suffix``: ``.tmp`` for a file, none
    for a folder). ``place`` may do more than rename (:func:`tandem.outdir.atomic_dir` marks the folder
    and swaps it with the old one) or keep an existing target (the temp is then removed).
    """
    target = Path(target)
    try:
        tmp = _make_temp(target, folder, suffix, tmp_name)
    except OSError as exc:
        raise write_error(exc, target) or exc from exc
    try:
        yield tmp
        place(tmp, target)
    except BaseException as exc:
        _remove(tmp)
        if isinstance(exc, OSError) and (error := write_error(exc, target)) is not None:
            raise error from exc
        raise
    if tmp.exists() and tmp != target:  # ``place`` kept the existing target (a concurrent writer won)
        _remove(tmp)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Open a temp file beside ``path`` for writing; it is flushed to disk and renamed into place only
    if the block succeeds (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp, open(tmp, mode, encoding=encoding if "b" not in mode else None) as handle:
        yield handle
        handle.flush()
        os.fsync(handle.fileno())


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
