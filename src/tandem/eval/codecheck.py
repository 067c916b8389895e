"""Which code answered a run's questions: a fingerprint of the files that shape a method's answers, kept in
the run folder's ``code.json``, so that a resumed run does not mix the answers of two versions of a
method's prompts or algorithm without saying so.

The fingerprint covers the method's own folder (algorithm, prompts, settings; not its training files),
the prompt parts the methods share (``tandem/methods/answers.py``, ``base.py``, ``parts.py``) and the
scoring prompts (``tandem/eval/judge.py``: the judge and the re-answer). Retrievers and LLM engines are
not in it: their settings are part of the run's config and checked as such."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from tandem.errors import ConfigError
from tandem.io import write_json_atomic

SHARED = ("methods/answers.py", "methods/base.py", "methods/parts.py", "eval/judge.py")
# in the run folder: {"files": {file (relative to the tandem package): sha256[:16]},
#                     "changes": [{"after_questions": n, "files": [...]}, ...]} (one per allowed change)
CODE_FILE = "code.json"
TRAINING = ("train", "finetune", "sft")  # a method folder's files that train models rather than answer


def method_code(method: object) -> dict[str, str]:
    """{file: short SHA-256} of the files that shape ``method``'s answers (module doc); a method defined
    outside the tandem package counts its own module's file."""
    root = Path(__file__).resolve().parents[1]  # the tandem package
    module = sys.modules.get(type(method).__module__)
    own = Path(module.__file__).resolve() if module is not None and getattr(module, "__file__", None) else None
    files: list[Path] = [root / rel for rel in SHARED]
    if own is not None and own.is_relative_to(root / "methods"):
        files += sorted(p for p in own.parent.glob("*.py") if not p.name.startswith(TRAINING))
    elif own is not None:
        files.append(own)
    out = {}
    for path in files:
        name = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        out[name] = hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else "missing"
    return out


def keep_code(folder: Path, method: object, answered: int, allow_change: bool) -> dict[str, Any]:
    """Compare ``method``'s code with what answered the ``answered`` questions already saved in run folder
    ``folder`` (its ``code.json``) and keep today's there. A change is a ConfigError naming the files unless
    ``allow_change``: then it is recorded in ``changes`` (after how many answers, which files) and the run's
    answers are known to come from two versions. A run begun before this file was kept records today's code
    from then on. Returns what was written."""
    path = folder / CODE_FILE
    code = method_code(method)
    kept: dict[str, Any] = {}
    if path.is_file():
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: unreadable ({exc}); remove it to go on without the check of the "
                              "answers made so far") from None
        if not isinstance(kept, dict) or not isinstance(kept.get("files") or {}, dict):
            raise ConfigError(f"{path}: not what tandem writes there (an object with 'files'); remove it to go on "
                              "without the check of the answers made so far")
    changes = list(kept.get("changes") or [])
    before = kept.get("files")
    if before and answered and before != code:
        changed = sorted(k for k in set(before) | set(code) if before.get(k) != code.get(k))
        if not allow_change:
            raise ConfigError(
                f"{folder}: the method's code changed since its {answered} saved answers were made "
                f"({', '.join(changed)}): going on would mix the answers of two versions. Use another --out to "
                f"start afresh, or --allow-code-change to go on (the change is recorded in {CODE_FILE})")
        changes.append({"after_questions": answered, "files": changed})
    record = {"files": code, "changes": changes}
    if record != kept:
        write_json_atomic(path, record)
    return record


__all__ = ["CODE_FILE", "keep_code", "method_code"]
