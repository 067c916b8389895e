"""Text encoders for dense retrieval: L2-normalised float32 vectors from a sentence-transformers model.

Backends (``ENCODERS``):

- ``st``: sentence-transformers' own ``encode()``; the reference.
- ``onnx``: the same transformer exported to ONNX, with onnxruntime's BERT fusions (fused
  attention, skip-layer-norm, bias-GELU), run by onnxruntime on token-length-sorted batches.
  Vectors match ``st`` to float rounding (cosine > 0.9999).
- ``onnx-int8``: ``onnx`` with dynamic int8 quantisation of the weight matrices (per output
  channel; the few MatMuls most hurt by int8 stay float32). About 2x ``st``'s passages/s on
  2 cores, cosine ~0.995 to ``st``, recall@5 on the HotpotQA dev500 pool within 0.5 point
  (see docs/benchmarks.md).

``load_encoder`` without a backend picks ``DEFAULT_BACKEND`` and falls back to ``st`` when
onnxruntime (or, to build the model the first time, ``onnx``) is not installed or the model is not
one the ONNX backends support. Every backend keeps the model's name in ``name`` so an index records
which model made it; ``backend`` says which code path did.

The exported models are cached under ``encoders/<key>/`` in tandem's cache root
(:func:`tandem.model_files.cache_root`: ``$TANDEM_CACHE``, ``$XDG_CACHE_HOME/tandem`` or
``~/.cache/tandem``), where the key hashes the model folder, its weight files' sizes and mtimes,
and the export recipe; a file is built only when missing, in a temporary file then renamed.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from tandem.errors import ConfigError
from tandem.index.onnx_export import (
    EXPORT_VERSION,
    ONNX_OPSET,
    SentenceTransformerLayout,
    atomic_build,
    export_onnx,
    optimise_onnx,
    quantise_int8,
)
from tandem.model_files import (
    DEFAULT_ENCODER,
    cache_root,
    canonical_name,
    offline_env,
    resolve_model,
)
from tandem.types import OnProgress

log = logging.getLogger(__name__)

#: The backend ``load_encoder`` uses when none is given (falls back to ``st`` if unavailable).
DEFAULT_BACKEND = "onnx-int8"

#: Batches per ``SentenceTransformer.encode`` call when progress is reported (it sorts by length
#: within a call, so larger chunks pad less).
ST_PROGRESS_BATCHES = 8


@runtime_checkable
class Encoder(Protocol):
    """Maps texts to L2-normalised float32 vectors of shape (n, dim)."""

    name: str
    dim: int
    pooling: str

    def encode(self, texts: Sequence[str], *, batch_size: int = 64,
               on_progress: OnProgress | None = None) -> np.ndarray:
        """Encode texts; rows are unit-norm float32. ``on_progress(done, total)`` counts texts encoded."""
        ...


class SentenceTransformerEncoder:
    """sentence-transformers' own ``encode()``: the reference every faster encoder is checked against."""

    backend = "st"

    def __init__(self, name: str = DEFAULT_ENCODER, device: str = "cpu", max_seq_length: int | None = None) -> None:
        offline_env()
        from sentence_transformers import SentenceTransformer

        self.name = canonical_name(name)
        self.model = SentenceTransformer(resolve_model(name), device=device)
        if max_seq_length is not None:
            self.model.max_seq_length = max_seq_length
        dim = self.model.get_embedding_dimension()
        if dim is None:
            raise ConfigError(f"model {name!r} does not report its embedding dimension")
        self.dim = int(dim)
        self.pooling = _pooling_mode(self.model)

    def encode(self, texts: Sequence[str], *, batch_size: int = 64,
               on_progress: OnProgress | None = None) -> np.ndarray:
        """Encode with ``SentenceTransformer.encode`` (normalised, float32, input order). With
        ``on_progress`` the texts go in chunks of :data:`ST_PROGRESS_BATCHES` batches, reported after each."""
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        texts = list(texts)
        chunk = len(texts) if on_progress is None else max(1, batch_size) * ST_PROGRESS_BATCHES
        parts = []
        for start in range(0, len(texts), chunk):
            parts.append(self.model.encode(texts[start:start + chunk], batch_size=batch_size, convert_to_numpy=True,
                                           normalize_embeddings=True, show_progress_bar=False))
            if on_progress is not None:
                on_progress(min(start + chunk, len(texts)), len(texts))
        return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)


def _pooling_mode(model: object) -> str:
    for module in model:  # type: ignore[attr-defined]
        mode = getattr(module, "pooling_mode", None)
        if mode is not None:
            return str(mode)
    return "unknown"


# ----------------------------------------------------------------------------------------------
# ONNX backends


def encoder_cache_dir() -> Path:
    """Root folder of cached exported encoders: ``encoders/`` under :func:`tandem.model_files.cache_root`."""
    return cache_root("encoders")


def default_threads() -> int:
    """CPU cores this process may use (``TANDEM_ENCODER_THREADS`` overrides)."""
    env = os.environ.get("TANDEM_ENCODER_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError as exc:
            raise ConfigError(f"TANDEM_ENCODER_THREADS must be an integer, got {env!r}") from exc
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class OnnxEncoder:
    """The sentence-transformers model as an optimised ONNX graph run by onnxruntime.

    Texts are tokenised once (truncated to ``max_seq_length`` as sentence-transformers does),
    sorted by token count so each batch pads little, encoded, pooled, L2-normalised, and put back
    in input order.
    """

    backend = "onnx"
    quantise = False

    def __init__(
        self,
        name: str = DEFAULT_ENCODER,
        max_seq_length: int | None = None,
        threads: int | None = None,
        cache_dir: str | Path | None = None,
    ) -> None:
        offline_env()
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise ImportError(
                f"encoder backend {self.backend!r} needs onnxruntime: pip install 'tandem[onnx]'"
            ) from exc

        self.name = canonical_name(name)
        folder = Path(resolve_model(name))
        if not folder.is_dir():
            raise ConfigError(f"encoder backend {self.backend!r} needs a local model folder, got {name!r}")
        self._layout = SentenceTransformerLayout(folder, max_seq_length)
        self.dim = self._layout.dim
        self.pooling = self._layout.pooling
        self.max_seq_length = self._layout.max_seq_length
        self.threads = threads or default_threads()
        root = Path(cache_dir).expanduser() if cache_dir is not None else encoder_cache_dir()
        self.cache_folder = root / self._layout.cache_key(f"opset{ONNX_OPSET}")
        self.model_path, self.built = self._ensure_model()

        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_seq_length)
        self.tokenizer.no_padding()
        pad_id = self.tokenizer.token_to_id("[PAD]")
        self.pad_id = int(pad_id) if pad_id is not None else 0

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        # Idle worker threads sleep instead of spinning: on a shared 2-core machine spinning
        # measured ~20% slower (it steals the cores from the other thread and from other work).
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(self.model_path), opts, providers=["CPUExecutionProvider"])
        self._input_names = {i.name for i in self.session.get_inputs()}

    def _ensure_model(self) -> tuple[Path, bool]:
        """Cached model file for this backend, building (export, optimise, maybe quantise) what is missing."""
        fp32 = self.cache_folder / "model.onnx"
        target = self.cache_folder / ("model_int8.onnx" if self.quantise else "model.onnx")
        if target.exists():
            return target, False
        try:
            import onnx  # noqa: F401  (the exporter and quantiser need it)
        except ImportError as exc:
            raise ImportError(
                f"building the {self.backend!r} encoder needs the 'onnx' package: pip install onnx"
            ) from exc
        log.info("exporting %s to ONNX in %s (once)", self.name, self.cache_folder)
        layout = self._layout

        def build_fp32(out: Path) -> None:
            raw = out.with_name(out.name + ".raw")
            try:
                export_onnx(layout, raw)
                optimise_onnx(layout, raw, out)
            finally:
                raw.unlink(missing_ok=True)

        built = atomic_build(fp32, build_fp32)
        if self.quantise:
            built = atomic_build(target, lambda out: quantise_int8(layout, fp32, out)) or built
        meta = self.cache_folder / "meta.json"
        if not meta.exists():
            info = {"model": str(layout.folder), "name": self.name, "export_version": EXPORT_VERSION}
            atomic_build(meta, lambda out: out.write_text(json.dumps(info, indent=1), encoding="utf-8"))
        return target, built

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids per text, truncated to ``max_seq_length`` (with [CLS]/[SEP])."""
        return [enc.ids for enc in self.tokenizer.encode_batch(list(texts))]

    def _batches(self, ids: list[list[int]], batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(row indices, padded ids, mask) for batches of texts sorted by decreasing token count."""
        order = np.argsort([-len(x) for x in ids], kind="stable")
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            width = len(ids[rows[0]])
            input_ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for j, r in enumerate(rows):
                seq = ids[r]
                input_ids[j, : len(seq)] = seq
                mask[j, : len(seq)] = 1
            yield rows, input_ids, mask

    def encode(self, texts: Sequence[str], *, batch_size: int = 64,
               on_progress: OnProgress | None = None) -> np.ndarray:
        """Encode texts in input order; rows are unit-norm float32. ``on_progress(done, total)`` after each
        batch, counting texts."""
        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of texts, not a single string")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if len(texts) == 0:
            return out
        ids = self.tokenize(texts)
        done = 0
        for rows, input_ids, mask in self._batches(ids, max(1, batch_size)):
            feeds = {"input_ids": input_ids, "attention_mask": mask}
            if "token_type_ids" in self._input_names:
                feeds["token_type_ids"] = np.zeros_like(input_ids)
            hidden = self.session.run(None, feeds)[0]
            out[rows] = self._pool(hidden, mask)
            done += len(rows)
            if on_progress is not None:
                on_progress(done, len(texts))
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out /= np.maximum(norms, 1e-12)
        return out

    def _pool(self, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        if self.pooling == "cls":
            return hidden[:, 0, :]
        m = mask[..., None].astype(np.float32)
        return (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)


class OnnxInt8Encoder(OnnxEncoder):
    """``OnnxEncoder`` with dynamic int8 weights (per channel): the fastest backend within recall tolerance.

    Activations are quantised per batch, so a text's vector moves slightly (cosine ~0.99) with
    the texts it is batched with; use ``onnx`` where bit-stable vectors matter.
    """

    backend = "onnx-int8"
    quantise = True


ENCODERS: dict[str, type] = {
    "st": SentenceTransformerEncoder,
    "onnx": OnnxEncoder,
    "onnx-int8": OnnxInt8Encoder,
}


def load_encoder(name: str = DEFAULT_ENCODER, backend: str | None = None) -> Encoder:
    """Build an encoder by model name/path and backend (see ``ENCODERS``).

    With ``backend=None`` (or ``"auto"``) it is ``DEFAULT_BACKEND``, falling back to ``st`` when
    that backend's packages are missing or it does not support the model. A backend named
    explicitly is never swapped: missing packages raise ``ConfigError``.
    """
    if backend is None or backend == "auto":
        try:
            return ENCODERS[DEFAULT_BACKEND](name)
        except (ImportError, ConfigError) as exc:
            log.info("encoder backend %r unavailable (%s); using 'st'", DEFAULT_BACKEND, exc)
            return SentenceTransformerEncoder(name)
    if backend not in ENCODERS:
        raise ConfigError(f"unknown encoder backend {backend!r}; choose one of {sorted(ENCODERS)} or 'auto'")
    try:
        return ENCODERS[backend](name)
    except ImportError as exc:
        raise ConfigError(str(exc)) from exc
