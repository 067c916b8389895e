"""The GGUF block readers behind the openvino engine's ``weights=q4_1`` (tandem.llm.ov_gguf)."""

from __future__ import annotations

import numpy as np
import pytest

from tandem.llm.ov_gguf import q4_1_blocks, q4_1_weight, q8_0_blocks, unpermute


def q4_1_bytes(d: np.ndarray, m: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Encode (rows, groups) scales/minimums and (rows, groups, 32) codes as GGUF Q4_1 rows."""
    rows, groups = d.shape
    out = np.zeros((rows, groups, 20), dtype=np.uint8)
    out[..., 0:2] = d.astype(np.float16)[..., None].view(np.uint8)
    out[..., 2:4] = m.astype(np.float16)[..., None].view(np.uint8)
    out[..., 4:] = q[..., :16] | (q[..., 16:] << 4)
    return out.reshape(rows, groups * 20)


def gguf_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter: rows of each head regrouped for its rotary layout (convert_hf_to_gguf.py)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def test_q4_1_blocks_decode_what_was_encoded() -> None:
    rng = np.random.default_rng(0)
    d, m = rng.uniform(0.01, 0.1, (3, 2)), rng.uniform(-1, 0, (3, 2))
    q = rng.integers(0, 16, (3, 2, 32), dtype=np.uint8)
    codes, scale, minimum = q4_1_blocks(q4_1_bytes(d, m, q))
    assert codes.shape == (3, 2, 32) and (codes == q).all()
    assert np.array_equal(scale[..., 0], d.astype(np.float16).astype(np.float32))
    assert np.array_equal(minimum[..., 0], m.astype(np.float16).astype(np.float32))


def test_q4_1_weight_reproduces_d_q_plus_m_also_for_flat_blocks() -> None:
    rng = np.random.default_rng(1)
    d, m = rng.uniform(0.01, 0.1, (4, 3)), rng.uniform(-1, 0, (4, 3))
    d[1, 2] = 0.0  # a block whose weights are all equal: d = 0, codes 0, every weight m
    q = rng.integers(0, 16, (4, 3, 32), dtype=np.uint8)
    q[1, 2] = 0
    codes, scale, zero = q4_1_weight(q4_1_bytes(d, m, q))
    d16, m16 = d.astype(np.float16).astype(np.float32), m.astype(np.float16).astype(np.float32)
    expected = d16[..., None] * q + m16[..., None]
    assert np.allclose(scale * (codes - zero), expected, rtol=0, atol=1e-6)
    assert np.isfinite(zero).all()


def test_unpermute_inverts_the_gguf_rotary_permutation() -> None:
    w = np.arange(12 * 4 * 3).reshape(12 * 4, 3)  # 4 heads of 12 rows
    assert np.array_equal(unpermute(gguf_permute(w, 4), 4), w)
    assert not np.array_equal(gguf_permute(w, 4), w)


def test_q8_0_blocks() -> None:
    raw = np.zeros((2, 34), dtype=np.uint8)
    raw[:, 0:2] = np.array([[0.5], [2.0]], dtype=np.float16).view(np.uint8)
    raw[:, 2:] = np.arange(-16, 16, dtype=np.int8).view(np.uint8)
    codes, scale = q8_0_blocks(raw)
    assert codes.dtype == np.int8 and codes[0, 0, 0] == -16 and codes[1, 0, 31] == 15
    assert (scale * codes)[1, 0, 0] == pytest.approx(-32.0)


def write_gguf(path, tensors: dict) -> None:
    """A minimal llama GGUF holding ``tensors`` (name -> (numpy array, GGML type or None for float))."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    for name, (array, raw) in tensors.items():
        writer.add_tensor(name, array, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_q4_1_linears_are_detected_and_other_quantisations_are_not(tmp_path) -> None:
    """The openvino engine's default weights: the GGUF's own blocks only where its linear layers are Q4_1."""
    from gguf import GGMLQuantizationType, GGUFReader

    from tandem.llm.ov_gguf import has_q4_1_linears

    rng = np.random.default_rng(2)
    blocks = q4_1_bytes(rng.uniform(0.01, 0.1, (4, 2)), rng.uniform(-1, 0, (4, 2)),
                        rng.integers(0, 16, (4, 2, 32), dtype=np.uint8))
    q41, f32 = tmp_path / "q41.gguf", tmp_path / "f32.gguf"
    write_gguf(q41, {"blk.0.attn_q.weight": (blocks, GGMLQuantizationType.Q4_1)})
    write_gguf(f32, {"blk.0.attn_q.weight": (rng.standard_normal((4, 64)).astype(np.float32), None),
                     "blk.0.attn_norm.weight": (np.ones(64, dtype=np.float32), None)})
    assert has_q4_1_linears(q41)
    assert not has_q4_1_linears(f32)
    assert not has_q4_1_linears(tmp_path / "missing.gguf")
    (tmp_path / "text.gguf").write_text("not a gguf")
    assert not has_q4_1_linears(tmp_path / "text.gguf")
    codes, _, _ = q4_1_blocks(np.asarray(GGUFReader(str(q41)).tensors[0].data))
    assert codes.shape == (4, 2, 32)  # the writer's bytes read back as the blocks they encode
