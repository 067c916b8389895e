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
(:func:`tandem.models.cache_root`: ``$TANDEM_CACHE``, ``$XDG_CACHE_HOME/tandem`` or
``~/.cache/tandem``), where the key hashes the model folder, its weight files' sizes and mtimes,
and the export recipe; a file is built only when missing, in a temporary file then renamed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from tandem.errors import ConfigError
from tandem.io import atomic_path
from tandem.models import (
    DEFAULT_ENCODER,
    cache_root,
    canonical_name,
    offline_env,
    resolve_model,
)
from tandem.types import OnProgress

log = logging.getLogger(__name__)

#: Bump when the export/optimise/quantise recipe changes: old cache entries are then ignored.
EXPORT_VERSION = 2
#: The backend ``load_encoder`` uses when none is given (falls back to ``st`` if unavailable).
DEFAULT_BACKEND = "onnx-int8"
_ONNX_OPSET = 17
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")

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
    """Root folder of cached exported encoders: ``encoders/`` under :func:`tandem.models.cache_root`."""
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


class _SentenceTransformerLayout:
    """What the ONNX backends need from a sentence-transformers folder, read without importing it."""

    def __init__(self, folder: Path, max_seq_length: int | None) -> None:
        self.folder = folder
        modules_file = folder / "modules.json"
        if not modules_file.exists():
            raise ConfigError(f"{folder} is not a sentence-transformers folder (no modules.json)")
        modules = json.loads(modules_file.read_text(encoding="utf-8"))
        kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
        allowed = {"Transformer", "Pooling", "Normalize"}
        if kinds[:2] != ["Transformer", "Pooling"] or not set(kinds) <= allowed:
            raise ConfigError(f"ONNX encoder supports Transformer+Pooling(+Normalize) models, {folder} has {kinds}")
        if modules[0].get("path"):
            raise ConfigError(f"ONNX encoder expects the transformer at the top of {folder}")
        pooling_cfg = json.loads((folder / modules[1]["path"] / "config.json").read_text(encoding="utf-8"))
        modes = [
            mode
            for mode, key in (
                ("mean", "pooling_mode_mean_tokens"),
                ("cls", "pooling_mode_cls_token"),
                ("max", "pooling_mode_max_tokens"),
                ("mean_sqrt_len_tokens", "pooling_mode_mean_sqrt_len_tokens"),
                ("weightedmean", "pooling_mode_weightedmean_tokens"),
                ("lasttoken", "pooling_mode_lasttoken"),
            )
            if pooling_cfg.get(key)
        ]
        if len(modes) != 1 or modes[0] not in ("mean", "cls"):
            raise ConfigError(f"ONNX encoder supports mean or cls pooling, {folder} has {modes}")
        self.pooling = modes[0]
        st_cfg_file = folder / "sentence_bert_config.json"
        st_cfg = json.loads(st_cfg_file.read_text(encoding="utf-8")) if st_cfg_file.exists() else {}
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        self.config = config
        self.dim = int(pooling_cfg.get("word_embedding_dimension") or config["hidden_size"])
        limit = int(config.get("max_position_embeddings", 512))
        wanted = max_seq_length or st_cfg.get("max_seq_length") or limit
        self.max_seq_length = min(int(wanted), limit)
        if not (folder / "tokenizer.json").exists():
            raise ConfigError(f"ONNX encoder needs a fast tokenizer (tokenizer.json) in {folder}")

    def cache_key(self, recipe: str) -> str:
        """Hash of the model folder's identity (weights' size and mtime) and the export recipe."""
        h = hashlib.sha256()
        h.update(f"v{EXPORT_VERSION}|{recipe}|{self.folder.resolve()}".encode())
        for fname in ("config.json", *_WEIGHT_FILES):
            path = self.folder / fname
            if path.exists():
                st = path.stat()
                h.update(f"|{fname}:{st.st_size}:{st.st_mtime_ns}".encode())
        return h.hexdigest()[:20]


def _atomic_build(target: Path, build: Callable[[Path], object]) -> bool:
    """Run ``build(tmp_path)`` and rename the result to ``target`` unless it already exists.

    Returns True if this call built the file. Concurrent builders each write their own temp file;
    ``os.replace`` makes whichever finishes last win, with identical content.
    """
    if target.exists():
        return False
    with atomic_path(target) as tmp:
        build(tmp)
        os.chmod(tmp, 0o644)
    return True


def _export_onnx(layout: _SentenceTransformerLayout, out: Path) -> None:
    """Export the HF transformer (last hidden state) to ONNX with dynamic batch and sequence axes."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(layout.folder), attn_implementation="eager").eval()

    class _LastHidden(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    ids = torch.ones((2, 16), dtype=torch.long)
    mask = torch.ones((2, 16), dtype=torch.long)
    axes = {0: "batch", 1: "seq"}
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _LastHidden(model),
            (ids, mask),
            str(out),
            input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state"],
            dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes},
            opset_version=_ONNX_OPSET,
            dynamo=False,
        )


def _optimise_onnx(layout: _SentenceTransformerLayout, src: Path, out: Path) -> None:
    """Apply onnxruntime's BERT fusions (attention, skip-layer-norm, bias-GELU); other models are copied."""
    from onnxruntime.transformers.optimizer import optimize_model

    if layout.config.get("model_type") != "bert":
        out.write_bytes(src.read_bytes())
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = optimize_model(
            str(src),
            model_type="bert",
            num_heads=int(layout.config.get("num_attention_heads", 0)),
            hidden_size=int(layout.config.get("hidden_size", 0)),
            opt_level=1,
            use_gpu=False,
        )
    opt.save_model_to_file(str(out))


def _quantise_int8(layout: _SentenceTransformerLayout, src: Path, out: Path) -> None:
    """Dynamic int8 quantisation of the weight matrices, per output channel.

    The MatMuls most hurt by int8 stay float32: all of the first layer's, and the FFN output
    projections of the second and last layers (measured: recall@5 on the dev500 pool 79.4 vs 79.5
    for float32, where quantising everything gave 78.9; see docs/benchmarks.md).
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    last = int(layout.config.get("num_hidden_layers", 6)) - 1
    sensitive = ("/layer.0/", "/layer.1/output/dense/", f"/layer.{last}/output/dense/")
    graph = onnx.load(str(src), load_external_data=False).graph
    keep_float = [n.name for n in graph.node if n.op_type == "MatMul" and any(s in n.name for s in sensitive)]
    quant_logger = logging.getLogger()
    level = quant_logger.level
    quant_logger.setLevel(max(level, logging.ERROR))  # quantize_dynamic warns about pre-processing on root
    try:
        quantize_dynamic(
            str(src),
            str(out),
            weight_type=QuantType.QInt8,
            per_channel=True,
            nodes_to_exclude=keep_float,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    finally:
        quant_logger.setLevel(level)


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
        self._layout = _SentenceTransformerLayout(folder, max_seq_length)
        self.dim = self._layout.dim
        self.pooling = self._layout.pooling
        self.max_seq_length = self._layout.max_seq_length
        self.threads = threads or default_threads()
        root = Path(cache_dir).expanduser() if cache_dir is not None else encoder_cache_dir()
        self.cache_folder = root / self._layout.cache_key(f"opset{_ONNX_OPSET}")
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
                _export_onnx(layout, raw)
                _optimise_onnx(layout, raw, out)
            finally:
                raw.unlink(missing_ok=True)

        built = _atomic_build(fp32, build_fp32)
        if self.quantise:
            built = _atomic_build(target, lambda out: _quantise_int8(layout, fp32, out)) or built
        meta = self.cache_folder / "meta.json"
        if not meta.exists():
            info = {"model": str(layout.folder), "name": self.name, "export_version": EXPORT_VERSION}
            _atomic_build(meta, lambda out: out.write_text(json.dumps(info, indent=1), encoding="utf-8"))
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
