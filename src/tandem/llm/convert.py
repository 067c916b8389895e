"""GGUF models converted once for transformers, under tandem's cache root (the ``local`` backend's first step).

transformers can read a GGUF file directly (``gguf_file=``) but that takes 15-45 s each time
(tokenizer/metadata parsing). So the first use converts it once into a plain transformers folder;
later loads take well under a second and give identical logits:

    <cache root>/models/<name>-<key>/            (key: hash of the GGUF's name, size, mtime + transformers version)
    <cache root>/models/<name>-<key>-tokenizer/  (tokenizer, config and generation config only: no weights)

The conversion writes into a temporary folder next to the target and renames it into place, so a
crash or a concurrent conversion never leaves a half-written model behind.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from tandem.errors import ConfigError, ModelNotFoundError
from tandem.io import atomic_path
from tandem.llm.ladder import find
from tandem.llm.ladder import gguf_path as ladder_gguf
from tandem.model_files import cache_root, canonical_name, offline_env, resolve_model

MARKER = "tandem-conversion.json"
log = logging.getLogger(__name__)


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
    gguf = gguf_file(name)
    target = converted_dir(short_name(name), gguf, cache_dir)
    if (target / MARKER).is_file():
        return target
    with atomic_path(target, folder=True, place=_rename_unless_converted) as tmp:
        seconds = _convert(gguf, tmp)
        (tmp / MARKER).write_text(
            json.dumps({"source": str(gguf), "size": gguf.stat().st_size, "seconds": round(seconds, 1)}, indent=1)
        )
    return target


def gguf_file(name: str) -> Path:
    """The GGUF file model ``name`` (a ladder name, :mod:`tandem.llm.ladder`, or a path) resolves to."""
    ladder_model = find(name)
    if ladder_model is not None and len(ladder_model.parts) > 1:  # assembled once from its PyPI parts
        return ladder_gguf(name)
    gguf = Path(resolve_model(name))
    if gguf.suffix != ".gguf" or not gguf.is_file():
        from tandem.llm.ladder import LADDER, MODEL_ENV

        where = (f" (${MODEL_ENV} names it)" if os.environ.get(MODEL_ENV, "").strip() == name.strip() else "")
        raise ModelNotFoundError(f"local backend: {name!r}{where} is neither a model of the ladder ({sorted(LADDER)}; "
                                 f"`tandem llms` lists them) nor a GGUF file (it resolved to {gguf})")
    return gguf


def ensure_tokenizer(name: str, cache_dir: str | Path | None = None) -> Path:
    """A folder holding model ``name``'s tokenizer, config and generation config read from its GGUF, without
    its weights (what the engine needs beside a GGUF OpenVINO reads itself); made once like
    :func:`ensure_converted`: ``<name>-<key>-tokenizer/``."""
    gguf = gguf_file(name)
    base = converted_dir(short_name(name), gguf, cache_dir)
    target = base.with_name(f"{base.name}-tokenizer")
    if (target / MARKER).is_file():
        return target
    with atomic_path(target, folder=True, place=_rename_unless_converted) as tmp:
        seconds = _convert(gguf, tmp, weights=False)
        (tmp / MARKER).write_text(json.dumps({"source": str(gguf), "size": gguf.stat().st_size, "weights": False,
                                              "seconds": round(seconds, 1)}, indent=1))
    return target


def _rename_unless_converted(tmp: Path, target: Path) -> None:
    """Rename the finished conversion into place; a concurrent conversion that got there first wins
    (the temp folder is then discarded)."""
    try:
        os.rename(tmp, target)
    except OSError:
        if not (target / MARKER).is_file():  # not a concurrent winner: a real failure
            raise


def _convert(gguf: Path, out: Path, *, weights: bool = True) -> float:
    """Load ``gguf`` with transformers (dequantised to float32) and save model + tokenizer; with
    ``weights=False`` only the tokenizer, config and generation config (nothing is dequantised)."""
    offline_env()
    if weights and importlib.util.find_spec("accelerate") is None:
        raise ConfigError("converting a GGUF model with transformers needs accelerate: pip install accelerate")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    start = time.perf_counter()
    folder, filename = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
    if not weights:
        config = AutoConfig.from_pretrained(folder, gguf_file=filename)
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        generation = GenerationConfig.from_model_config(config)
        _chat_fixes(tokenizer, generation, config.model_type)
        config.save_pretrained(out)
        generation.save_pretrained(out)
        tokenizer.save_pretrained(out)
        return time.perf_counter() - start
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the saved folder holds plain float weights
    # a model loaded from a GGUF is marked quantised and will not save: a plain one built on the meta device
    # takes its tensors as they are (assign, no second copy: the 1.5B peaks at ~8.6 GB instead of ~17)
    with torch.device("meta"):
        fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict(), strict=True, assign=True)
    fresh.generation_config = loaded.generation_config
    _chat_fixes(tokenizer, fresh.generation_config, config.model_type)
    fresh.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return time.perf_counter() - start


#: chat templates for GGUFs that carry none, by architecture (Gemma 3's turn format)
CHAT_TEMPLATES = {"gemma": (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] + '\n\n' }}"
    "{% else %}{{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' else 'user') + '\n' + m['content'] "
    "+ '<end_of_turn>\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}")}


def _chat_fixes(tokenizer: Any, generation: Any, model_type: str) -> None:
    """A GGUF conversion may leave eos = ``<|im_start|>``: a ChatML model's assistant turn ends at ``<|im_end|>``;
    a GGUF without a chat template gets its architecture's (:data:`CHAT_TEMPLATES`), where one is known."""
    end_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(end_id, int) and end_id != tokenizer.unk_token_id:
        generation.eos_token_id = end_id
        if tokenizer.eos_token != "<|im_end|>":
            tokenizer.eos_token = "<|im_end|>"
    if not getattr(tokenizer, "chat_template", None):
        family = next((k for k in CHAT_TEMPLATES if model_type.startswith(k)), None)
        if family is not None:
            log.info("the GGUF carries no chat template: using %s's", family)
            tokenizer.chat_template = CHAT_TEMPLATES[family]


def short_name(name: str) -> str:
    """Embedded short name (``smollm2``) or the GGUF file's stem for a path."""
    short = canonical_name(name)
    model = find(short)
    if model is not None and model.name != "smollm2-135m":
        return model.name
    return Path(short).name[: -len(".gguf")] if short.endswith(".gguf") else short
