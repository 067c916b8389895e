"""The ONNX encoders' one-time build from a sentence-transformers folder: export to ONNX, optimise, quantise
to int8 (each step into the cache atomically, :func:`atomic_build`); :mod:`tandem.index.encoder` loads the
result."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from collections.abc import Callable
from pathlib import Path

from tandem.errors import ConfigError
from tandem.io import atomic_path

#: Bump when the export/optimise/quantise recipe changes: old cache entries are then ignored.
EXPORT_VERSION = 2
ONNX_OPSET = 17
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


class SentenceTransformerLayout:
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
        for fname in ("config.json", *WEIGHT_FILES):
            path = self.folder / fname
            if path.exists():
                st = path.stat()
                h.update(f"|{fname}:{st.st_size}:{st.st_mtime_ns}".encode())
        return h.hexdigest()[:20]


def atomic_build(target: Path, build: Callable[[Path], object]) -> bool:
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


def export_onnx(layout: SentenceTransformerLayout, out: Path) -> None:
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
            opset_version=ONNX_OPSET,
            dynamo=False,
        )


def optimise_onnx(layout: SentenceTransformerLayout, src: Path, out: Path) -> None:
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


def quantise_int8(layout: SentenceTransformerLayout, src: Path, out: Path) -> None:
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
