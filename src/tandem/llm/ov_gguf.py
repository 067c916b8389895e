"""OpenVINO weights made from the GGUF's own quantised blocks (the openvino engine's ``weights=q4_1``).

SmolLM2's GGUF stores every linear layer in Q4_1 (blocks of 32 weights along the input: ``w = d*q + m``
with an f16 scale ``d``, an f16 minimum ``m`` and 4-bit ``q``) and the tied embedding in Q8_0
(``w = d*q``, 8-bit signed ``q``). The torch path dequantises exactly these values to float32.
NNCF's int4 (``weights=int4``) quantises those floats afresh with an *integer* zero point, which cannot
express Q4_1's float minimum, and changed nearly every greedy answer.

:func:`rewrite_export` takes the fp16 export and replaces, in each linear layer, the weight constant by the
GGUF's own blocks in OpenVINO's weight-decompression form - ``u4`` codes, ``Subtract`` a float zero
point ``z = -m/d``, ``Multiply`` the scale ``d`` (so ``d*(q - z) = d*q + m``) - and the output head's by
the Q8_0 codes times their scale. The CPU plugin keeps such weights compressed and decompresses them
inside its matmul kernels, so a decoded token reads about a quarter of the fp16 bytes. The input
embedding stays f16 (a lookup reads one row a token).

GGUF files store llama's query and key rows permuted for llama.cpp's rotary layout; :func:`unpermute` puts
them back as transformers does when it reads the file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from tandem.errors import LLMError

GROUP = 32
#: GGUF tensor name part -> the transformers module it holds (the fp16 export names its constants after them)
LINEARS = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
           "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
           "ffn_down": "mlp.down_proj"}
EMBEDDING = "token_embd.weight"
EXPORT_NAME = "self.model.{module}.weight_compressed"


def q4_1_blocks(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codes (rows, groups, 32) uint8 in 0..15, scales and minimums (rows, groups, 1) float32 of a Q4_1
    tensor's bytes (rows, 20 x groups): each block is f16 d, f16 m, then 16 bytes of two 4-bit codes
    (element j in the low nibble of byte j, element j + 16 in the high one)."""
    blocks = np.ascontiguousarray(raw).reshape(raw.shape[0], -1, 20)
    d = np.ascontiguousarray(blocks[..., 0:2]).view(np.float16).astype(np.float32)
    m = np.ascontiguousarray(blocks[..., 2:4]).view(np.float16).astype(np.float32)
    qs = blocks[..., 4:]
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1), d, m


def q8_0_blocks(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes (rows, groups, 32) int8 and scales (rows, groups, 1) float32 of a Q8_0 tensor's bytes
    (rows, 34 x groups): each block is f16 d, then 32 signed bytes."""
    blocks = np.ascontiguousarray(raw).reshape(raw.shape[0], -1, 34)
    d = np.ascontiguousarray(blocks[..., 0:2]).view(np.float16).astype(np.float32)
    return np.ascontiguousarray(blocks[..., 2:]).view(np.int8), d


def unpermute(rows: np.ndarray, heads: int) -> np.ndarray:
    """Undo the GGUF converter's rotary permutation of a query/key weight's rows (any trailing shape)."""
    half = rows.shape[0] // heads // 2
    return rows.reshape(heads, half, 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def _u4_constant(codes: np.ndarray) -> Any:
    """An OpenVINO u4 constant of ``codes`` (values 0..15): two codes a byte, the first in the low nibble."""
    import openvino as ov

    flat = codes.reshape(-1).astype(np.uint8)
    tensor = ov.Tensor(ov.Type.u4, list(codes.shape))
    tensor.data[:] = (flat[0::2] | (flat[1::2] << 4)).reshape(tensor.data.shape)
    return ov.op.Constant(tensor)


def decompressed(codes: np.ndarray, scale: np.ndarray, zero: np.ndarray | None, shape: tuple[int, int]) -> Any:
    """The weight-decompression subgraph ``reshape(scale * (codes - zero))`` in float32 (``zero`` None: no
    Subtract), the form OpenVINO's CPU plugin runs compressed."""
    import openvino as ov
    import openvino.opset13 as ops

    const = _u4_constant(codes) if codes.dtype == np.uint8 else ops.constant(codes, ov.Type.i8)
    node = ops.convert(const, ov.Type.f32)
    if zero is not None:
        node = ops.subtract(node, ops.constant(zero.astype(np.float32)))
    node = ops.multiply(node, ops.constant(scale.astype(np.float32)))
    return ops.reshape(node, ops.constant(np.array(shape, dtype=np.int64)), special_zero=False)


def q4_1_weight(raw: np.ndarray, heads: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes, scale, zero) of a Q4_1 linear weight with ``d * (codes - zero) == d * codes + m``; rows
    un-permuted when ``heads`` is given (queries and keys). A block with d = 0 (all weights equal to m)
    gets scale m and zero -1."""
    codes, d, m = q4_1_blocks(raw)
    if heads:
        codes, d, m = unpermute(codes, heads), unpermute(d, heads), unpermute(m, heads)
    flat = d == 0
    scale = np.where(flat, m, d)
    with np.errstate(divide="ignore", invalid="ignore"):
        zero = np.where(flat, -1.0, -m / np.where(flat, 1.0, d)).astype(np.float32)
    return codes, scale, zero


def has_q4_1_linears(gguf: str | Path) -> bool:
    """True when the GGUF file's linear layers are stored as Q4_1 (what :func:`rewrite_export` maps);
    False for other quantisations and for files that are not GGUF."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(gguf))
    except (OSError, ValueError):
        return False
    names = (re.fullmatch(r"blk\.\d+\.(\w+)\.weight", t.name) for t in reader.tensors if t.tensor_type.name == "Q4_1")
    return any(hit is not None and hit.group(1) in LINEARS for hit in names)


def rewrite_export(gguf: Path, fp16_xml: Path, out_xml: Path) -> dict[str, int]:
    """Write ``out_xml`` (+ .bin): the fp16 export ``fp16_xml`` with its linear layers and output head on
    the GGUF's own quantised blocks. Returns how many weights of each kind were replaced."""
    import openvino as ov
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf))
    heads = int(reader.fields["llama.attention.head_count"].parts[-1][0])
    kv_heads = int(reader.fields["llama.attention.head_count_kv"].parts[-1][0])
    model = ov.Core().read_model(str(fp16_xml))
    consts = {op.get_friendly_name(): op for op in model.get_ordered_ops() if op.get_type_name() == "Constant"}
    done = {"q4_1": 0, "q8_0": 0}
    for tensor in reader.tensors:
        kind = tensor.tensor_type.name
        hit = re.fullmatch(r"blk\.(\d+)\.(\w+)\.weight", tensor.name)
        if hit and hit.group(2) in LINEARS and kind == "Q4_1":
            name = EXPORT_NAME.format(module=f"layers.{hit.group(1)}.{LINEARS[hit.group(2)]}")
            permute = {"attn_q": heads, "attn_k": kv_heads}.get(hit.group(2))
            codes, scale, zero = q4_1_weight(np.asarray(tensor.data), permute)
            targets = _matmul_inputs(consts, name)
            new = decompressed(codes, scale, zero, (codes.shape[0], codes.shape[1] * GROUP))
            done["q4_1"] += 1
        elif tensor.name == EMBEDDING and kind == "Q8_0":
            name = EXPORT_NAME.format(module="embed_tokens")
            codes, scale = q8_0_blocks(np.asarray(tensor.data))
            targets = _matmul_inputs(consts, name)  # the tied output head; the lookup keeps the f16 table
            new = decompressed(codes, scale, None, (codes.shape[0], codes.shape[1] * GROUP))
            done["q8_0"] += 1
        else:
            continue
        for target in targets:
            target.replace_source_output(new.output(0))
    if done["q4_1"] == 0:
        raise LLMError(f"{gguf}: no Q4_1 linear layer matched the export {fp16_xml}; weights=q4_1 needs a llama "
                       f"GGUF quantised as Q4_1")
    model.validate_nodes_and_infer_types()
    ov.save_model(model, str(out_xml), compress_to_fp16=False)
    return done


def _matmul_inputs(consts: dict[str, Any], name: str) -> list[Any]:
    """The MatMul inputs fed by the export's constant ``name`` (through its f16 -> f32 Convert)."""
    if name not in consts:
        raise LLMError(f"the fp16 export has no weight named {name}; it was not made from this GGUF's model")
    out = []
    for convert in consts[name].output(0).get_target_inputs():
        for target in convert.get_node().output(0).get_target_inputs():
            if target.get_node().get_type_name() == "MatMul":
                out.append(target)
    return out


#: what runs in a child process to read a GGUF with OpenVINO GenAI and save it as OpenVINO IR beside it
_SAVE_IR = "import sys, openvino_genai as g; g.LLMPipeline(sys.argv[1], 'CPU', enable_save_ov_model=True)"


def save_native_ir(gguf: Path, out: Path, timeout: float) -> None:
    """OpenVINO GenAI reads ``gguf`` itself (its quantised blocks as they are) and saves the model as
    OpenVINO IR into the folder ``out``, in a child process: the read peaks at about three times the
    file's size (3.7 GB for the 1.5B), and loading the IR afterwards needs far less (docs/models.md). Raises
    :class:`LLMError` with OpenVINO's last line where it cannot read the file (a quantisation or an
    architecture its reader lacks)."""
    import subprocess
    import sys

    link = out / "model.gguf"
    link.symlink_to(gguf.resolve())
    try:
        done = subprocess.run([sys.executable, "-c", _SAVE_IR, str(link)], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise LLMError(f"OpenVINO took over {timeout:.0f} s to read {gguf.name}") from exc
    finally:
        link.unlink()
    if done.returncode != 0 or not (out / "openvino_model.xml").is_file():
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise LLMError(f"OpenVINO could not read {gguf.name} (exit {done.returncode}): "
                       f"{lines[-1] if lines else 'no message'}")
