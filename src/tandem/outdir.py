"""Output folders tandem owns: a marker file, an exclusive lock, and atomic replacement with roll-back.

Rules (docs/reliability.md):

- tandem writes only into folders it created. Each one carries :data:`MARKER` (``.tandem.json``:
  kind, version, and for replaced folders the top-level names tandem wrote). A folder that exists,
  is not empty and has no marker (or the marker of another kind) is refused before any work starts.
- A folder replaced as a whole (index, model, checkpoint: :func:`atomic_dir`) is replaced only if
  every entry in it was written by tandem; a file someone added is never deleted.
- One process at a time per folder: :func:`folder_lock` holds an ``flock`` on ``.<name>.lock``
  beside the folder (removed when released); a second process gets a
  :class:`~tandem.errors.ConfigError` naming the holder.
- A replacement renames the old folder to ``.<name>.old-<pid>``, the new one into place, then
  deletes the old one. A crash between the two renames is rolled back by :func:`recover_swap`,
  which every build and open calls; temp folders of dead builds are removed at the next build.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tandem.errors import ConfigError, DamagedError
from tandem.io import atomic_open, atomic_path, write_json_atomic
from tandem.version import __version__

MARKER = ".tandem.json"


def _json_file(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def _legacy_index(folder: Path) -> bool:
    """A tandem manifest and nothing but index files."""
    manifest = _json_file(folder / "manifest.json")
    return ({"format_version", "corpus_hash", "kind"} <= set(manifest)
            and _names(folder) <= {"manifest.json", "docs.jsonl", "docs.offsets.npy", "bm25", "dense.faiss",
                                   "dense.vectors", "dense.ivfdata", "qdrant", "extras"})


def _legacy_run(task: str) -> Callable[[Path], bool]:
    """A run folder whose config.json names its task."""
    return lambda folder: _json_file(folder / "config.json").get("task") == task


# Folders made before markers existed: kind -> a check that the folder is one tandem wrote.
LegacyCheck = Callable[[Path], bool]
LEGACY: dict[str, LegacyCheck] = {
    "index": _legacy_index,
    "qa-run": _legacy_run("qa"),
    "retrieval-run": _legacy_run("retrieval"),
    "r2former": lambda folder: _names(folder) <= {"r2former.json", "r2former.pt", "trainer.pt", "lora", "train_report.json"},
    "retriever": lambda folder: ((folder / "train_log.json").is_file() and (folder / "modules.json").is_file()
                                 and (folder / "config_sentence_transformers.json").is_file()),
}

_held: dict[Path, tuple[int, int, int]] = {}  # lock path -> (fd, depth, thread): re-entrant within one thread
_held_guard = threading.Lock()


def read_marker(folder: Path) -> dict[str, Any] | None:
    """The folder's marker, or None when it has none (or it is unreadable)."""
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_marker(folder: Path, kind: str, written: list[str] | None = None,
                 files: dict[str, list[Any]] | None = None) -> None:
    """Mark ``folder`` as a tandem folder of ``kind``; ``written``: the names tandem wrote; ``files``:
    the size and content hash of each file (:func:`file_records`)."""
    record: dict[str, Any] = {"kind": kind, "tandem_version": __version__}
    if written is not None:
        record["written"] = sorted(written)
    if files is not None:
        record["files"] = files
    write_json_atomic(folder / MARKER, record)


def add_file(folder: str | Path, name: str, text: str) -> Path:
    """Write ``name`` into a folder tandem owns (atomically) and list it in the marker as tandem's, so a
    later replacement of the folder may delete it (and its size and hash, where the marker records them)."""
    path = Path(folder)
    with atomic_open(path / name) as handle:
        handle.write(text)
    marker = read_marker(path)
    if marker is not None and "written" in marker:
        files = marker.get("files")
        if files is not None:
            files = {**files, name: file_record(path / name)}
        write_marker(path, marker["kind"], sorted({*marker["written"], name}), files)
    return path / name


#: Files whose bytes change while they are used (Qdrant's embedded storage): only their presence is checked.
UNHASHED = ("qdrant/",)


def file_record(path: Path) -> list[Any]:
    """[size, sha256] of a file."""
    with open(path, "rb") as handle:
        return [os.fstat(handle.fileno()).st_size, hashlib.file_digest(handle, "sha256").hexdigest()]


def file_records(folder: Path) -> dict[str, list[Any]]:
    """relative path -> [size in bytes, sha256] of every file under ``folder`` (the marker and the
    files of :data:`UNHASHED` excluded)."""
    return {rel: file_record(folder / rel) for rel in tree(folder)
            if (folder / rel).is_file() and not rel.startswith(UNHASHED)}


def damaged_files(folder: str | Path, *, deep: bool = False) -> list[tuple[str, str]]:
    """(file, problem) for every file the marker records that is missing, of another size or (``deep``)
    of other content; empty when the folder records no files (made before the records existed)."""
    path = Path(folder)
    records = (read_marker(path) or {}).get("files")
    if not isinstance(records, dict):
        return []
    problems: list[tuple[str, str]] = []
    for rel, (size, digest) in sorted(records.items()):
        file = path / rel
        try:
            actual = file.stat().st_size
        except OSError as exc:
            problems.append((rel, f"cannot be read ({exc.strerror})"))
            continue
        if actual != size:
            problems.append((rel, f"is {actual} bytes, {size} were written"))
        elif deep:
            try:
                same = file_record(file)[1] == digest
            except OSError as exc:
                problems.append((rel, f"cannot be read ({exc.strerror})"))
                continue
            if not same:
                problems.append((rel, "content differs from what was written (sha256)"))
    return problems


def check_files(folder: str | Path, fix: Callable[[str], str], *, deep: bool = False) -> None:
    """DamagedError naming the first damaged file of ``folder`` (see :func:`damaged_files`) and
    ``fix(file)``, the way to repair it; the sizes are cheap to check, ``deep`` also hashes every file."""
    problems = damaged_files(folder, deep=deep)
    if problems:
        rel, problem = problems[0]
        more = f" (and {len(problems) - 1} more damaged files)" if len(problems) > 1 else ""
        raise DamagedError(f"{Path(folder) / rel} {problem}: the file is damaged{more}; {fix(rel)}")


def tree(folder: Path) -> list[str]:
    """Every file and folder under ``folder`` as a relative POSIX path (the marker excluded)."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.name != MARKER or p.parent != folder)


def check_owned(folder: str | Path, kind: str, *, replacing: bool = False) -> bool:
    """Raise ConfigError unless tandem may write ``folder`` as a ``kind`` folder. Returns True if it
    exists and is tandem's (False: absent or empty). ``replacing``: the whole folder will be replaced,
    so every entry in it must be one tandem wrote."""
    path = Path(folder)
    if not path.exists():
        return False
    if not path.is_dir():
        raise ConfigError(f"{path} is a file, not a folder: give another --out")
    entries = sorted(p.name for p in path.iterdir())
    if not entries:
        return False
    marker = read_marker(path)
    if marker is None:
        if kind in LEGACY and LEGACY[kind](path):
            return True
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise ConfigError(f"{path} is not empty and was not made by tandem (it holds {shown}): "
                          "refusing to write into it; give a new or empty folder")
    if marker.get("kind") != kind:
        raise ConfigError(f"{path} holds a tandem {marker.get('kind')!r} folder, not a {kind!r} one: give another --out")
    if replacing and "written" in marker:
        foreign = sorted(set(tree(path)) - set(marker["written"]))
        if foreign:
            raise ConfigError(f"{path} holds files tandem did not write ({', '.join(foreign[:5])}): "
                              "refusing to replace the folder; move them out or give another --out")
    return True


def claim_dir(folder: str | Path, kind: str) -> Path:
    """Check ``folder`` (see :func:`check_owned`), create it and mark it; for folders written file by
    file (run folders), never replaced as a whole."""
    path = Path(folder)
    check_owned(path, kind)
    path.mkdir(parents=True, exist_ok=True)
    if read_marker(path) is None:
        write_marker(path, kind)
    return path


@contextlib.contextmanager
def owned_output(folder: str | Path, kind: str, *, replacing: bool = True) -> Iterator[Path]:
    """For a command's ``--out``: hold the folder's lock, roll back a cut swap, and check that tandem
    may write it, all before any work starts."""
    path = Path(folder)
    with folder_lock(path):
        recover_swap(path)
        check_owned(path, kind, replacing=replacing)
        yield path


def lock_path(folder: str | Path) -> Path:
    """The lock file of ``folder``: beside it (``.NAME.lock``), never inside the user's folder."""
    path = Path(folder).absolute()
    return path.parent / f".{path.name}.lock"


def _acquire(path: Path, folder: str | Path) -> int:
    """Open and flock ``path``; retried when another process deleted the file in between (the lock
    must be on the file the path names now)."""
    import fcntl

    for _ in range(20):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise ConfigError(f"{folder} is in use by another tandem process (pid {holder}); "
                              "wait for it to finish or give another --out") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode("ascii"))
            return fd
        os.close(fd)
    raise ConfigError(f"could not lock {folder}: its lock file {path} keeps changing")


@contextlib.contextmanager
def folder_lock(folder: str | Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` (re-entrant within one thread) through ``.<name>.lock``
    beside it, removed on release; another process holding it is a ConfigError naming its pid."""
    path = lock_path(folder)
    me = threading.get_ident()
    with _held_guard:
        if path in _held:
            fd, depth, owner = _held[path]
            if owner != me:
                raise ConfigError(f"{folder} is in use by another task of this process; wait for it to finish")
            _held[path] = (fd, depth + 1, me)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            _held[path] = (_acquire(path, folder), 1, me)
    try:
        yield
    finally:
        with _held_guard:
            fd, depth, owner = _held[path]
            if depth > 1:
                _held[path] = (fd, depth - 1, owner)
            else:
                del _held[path]
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)  # while still held: a waiting process re-checks the inode
                os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _dead(path: Path) -> bool:
    """Whether the process named in ``.<name>.old-<pid>[-<tag>]`` / ``.building-<pid>-<tag>`` is gone."""
    match = re.search(r"\.(?:old|building)-(\d+)(?:-[0-9a-f]+)?$", path.name)
    return bool(match) and not _pid_alive(int(match.group(1)))


def recover_swap(folder: str | Path) -> None:
    """Finish or roll back replacements of ``folder`` that a dead process left: with ``folder`` missing,
    its ``.old-<pid>`` copy is renamed back; with ``folder`` present, the old copy is deleted. Temp
    build folders of dead processes are deleted."""
    out = Path(folder)
    if not out.parent.is_dir():
        return
    for old in sorted(out.parent.glob(f".{out.name}.old-*")):
        if not _dead(old):
            continue
        if not out.exists():
            os.replace(old, out)
        else:
            shutil.rmtree(old, ignore_errors=True)
    for tmp in out.parent.glob(f".{out.name}.building-*"):
        if _dead(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def swap_dir(tmp: Path, out: Path) -> None:
    """Put the finished folder ``tmp`` at ``out``: old folder aside, new into place, old deleted; if the
    second rename fails the old folder goes back."""
    old = out.parent / f".{out.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    moved = out.exists()
    if moved:
        os.replace(out, old)
    try:
        os.replace(tmp, out)
    except BaseException:
        if moved:
            os.replace(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def atomic_dir(folder: str | Path, kind: str) -> Iterator[Path]:
    """Yield a temp folder beside ``folder``; if the block succeeds it replaces ``folder`` (readers see
    the old folder or the new one, never half). The checks of :func:`check_owned` run first, before
    any work; the new folder is marked as ``kind`` with the names written into it. The temp folder
    is the one of :func:`tandem.io.atomic_path`, named so that :func:`recover_swap` finds it."""
    out = Path(folder)

    def place(tmp: Path, target: Path) -> None:
        write_marker(tmp, kind, tree(tmp), file_records(tmp))
        check_owned(target, kind, replacing=True)  # again: a file added during the build is not deleted
        swap_dir(tmp, target)

    with folder_lock(out):
        recover_swap(out)
        check_owned(out, kind, replacing=True)
        with atomic_path(out, folder=True, tmp_name=f".{out.name}.building-{os.getpid()}-{uuid.uuid4().hex[:8]}",
                         place=place) as tmp:
            yield tmp
