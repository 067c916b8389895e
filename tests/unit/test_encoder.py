"""Encoders: backend registry and fallback (fast, no model), and the ONNX backends on the real MiniLM."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tandem.errors import ConfigError
from tandem.index import encoder as enc_mod
from tandem.index.encoder import (
    DEFAULT_BACKEND,
    ENCODERS,
    Encoder,
    OnnxEncoder,
    OnnxInt8Encoder,
    SentenceTransformerEncoder,
    encoder_cache_dir,
    load_encoder,
)
from tandem.index.onnx_export import atomic_build

SENTENCES = [
    "A man is eating food.",
    "Paris is the capital and most populous city of France.",
    "The Vistula is the longest river in Poland.",
    "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?",
]

# ---------------------------------------------------------------------------------------------
# fast: no model


def test_unknown_backend_is_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown encoder backend"):
        load_encoder("minilm", backend="no-such-backend")


def test_registry_has_reference_and_default() -> None:
    assert ENCODERS["st"] is SentenceTransformerEncoder
    assert DEFAULT_BACKEND in ENCODERS
    assert ENCODERS["onnx"] is OnnxEncoder and ENCODERS["onnx-int8"] is OnnxInt8Encoder


class _MissingDeps:
    def __init__(self, name: str) -> None:
        raise ImportError("encoder backend needs onnxruntime: pip install 'tandem[onnx]'")


class _StubST:
    backend = "st"

    def __init__(self, name: str) -> None:
        self.name = name


def test_default_backend_falls_back_to_st_when_deps_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ENCODERS, DEFAULT_BACKEND, _MissingDeps)
    monkeypatch.setattr(enc_mod, "SentenceTransformerEncoder", _StubST)
    enc = load_encoder("minilm")
    assert isinstance(enc, _StubST) and enc.backend == "st"
    assert isinstance(load_encoder("minilm", backend="auto"), _StubST)


def test_explicit_backend_with_missing_deps_is_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ENCODERS, "onnx-int8", _MissingDeps)
    with pytest.raises(ConfigError, match="onnxruntime"):
        load_encoder("minilm", backend="onnx-int8")


def test_cache_dir_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TANDEM_CACHE", raising=False)
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    assert encoder_cache_dir() == tmp_path / "encoders"
    monkeypatch.delenv("TANDEM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert encoder_cache_dir() == tmp_path / "xdg" / "tandem" / "encoders"


def test_atomic_build_writes_once_and_cleans_up_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "model.onnx"
    assert atomic_build(target, lambda out: out.write_text("one"))
    assert not atomic_build(target, lambda out: out.write_text("two"))  # exists: not rebuilt
    assert target.read_text() == "one"

    def boom(out: Path) -> None:
        out.write_text("partial")
        raise RuntimeError("export failed")

    failed = tmp_path / "sub" / "other.onnx"
    with pytest.raises(RuntimeError):
        atomic_build(failed, boom)
    assert not failed.exists()
    assert sorted(p.name for p in target.parent.iterdir()) == ["model.onnx"]  # no temp files left


# ---------------------------------------------------------------------------------------------
# integration: the real MiniLM, exported once into a temporary cache


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    return tmp_path_factory.mktemp("encoder-cache")


@pytest.fixture(scope="module")
def st_encoder() -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder("minilm")


@pytest.fixture(scope="module")
def int8_encoder(cache_dir: Path) -> OnnxInt8Encoder:
    return OnnxInt8Encoder("minilm", cache_dir=cache_dir)


@pytest.fixture(scope="module")
def fp32_encoder(cache_dir: Path, int8_encoder: OnnxInt8Encoder) -> OnnxEncoder:
    return OnnxEncoder("minilm", cache_dir=cache_dir)  # int8 built the float model on the way


@pytest.mark.integration
def test_output_shape_dtype_and_norm(int8_encoder: OnnxInt8Encoder) -> None:
    assert isinstance(int8_encoder, Encoder)
    vecs = int8_encoder.encode(SENTENCES)
    assert vecs.shape == (len(SENTENCES), int8_encoder.dim) == (4, 384)
    assert vecs.dtype == np.float32 and vecs.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert int8_encoder.encode([]).shape == (0, 384)


@pytest.mark.integration
def test_same_name_and_pooling_as_st(
    st_encoder: SentenceTransformerEncoder, int8_encoder: OnnxInt8Encoder, fp32_encoder: OnnxEncoder
) -> None:
    assert (st_encoder.name, st_encoder.dim, st_encoder.pooling) == ("minilm", 384, "mean")
    for enc in (int8_encoder, fp32_encoder):
        assert (enc.name, enc.dim, enc.pooling) == ("minilm", 384, "mean")
    assert (st_encoder.backend, fp32_encoder.backend, int8_encoder.backend) == ("st", "onnx", "onnx-int8")
    assert int8_encoder.max_seq_length == st_encoder.model.max_seq_length == 256


@pytest.mark.integration
def test_close_to_sentence_transformers(
    st_encoder: SentenceTransformerEncoder, int8_encoder: OnnxInt8Encoder, fp32_encoder: OnnxEncoder
) -> None:
    long_text = " ".join(["The river flows north through the old city and past the cathedral."] * 40)  # > 256 tokens
    texts = [*SENTENCES, long_text]
    ref = st_encoder.encode(texts)
    assert (fp32_encoder.encode(texts) * ref).sum(axis=1).min() >= 0.9999  # truncation matches too
    assert (int8_encoder.encode(texts) * ref).sum(axis=1).min() >= 0.99


@pytest.mark.integration
def test_length_sorting_keeps_input_order(int8_encoder: OnnxInt8Encoder, fp32_encoder: OnnxEncoder) -> None:
    texts = [
        "Short.",
        " ".join(["A much longer passage about the history of Warsaw and the Vistula river."] * 12),
        "Medium length sentence about Marie Curie and her two Nobel Prizes in physics and chemistry.",
        "Hi",
        " ".join(["Paris lies on the Seine."] * 5),
    ]
    # int8 quantises activations per batch (scale from the whole padded batch), so a text's vector
    # moves a little with its batch-mates; float32 must not move at all.
    for enc, floor in ((fp32_encoder, 0.9999), (int8_encoder, 0.97)):
        batched = enc.encode(texts, batch_size=2)
        single = np.vstack([enc.encode([t]) for t in texts])
        sims = batched @ single.T
        assert list(sims.argmax(axis=1)) == list(range(len(texts)))
        assert sims.diagonal().min() >= floor


@pytest.mark.integration
def test_cache_is_reused(cache_dir: Path, int8_encoder: OnnxInt8Encoder, monkeypatch: pytest.MonkeyPatch) -> None:
    path = int8_encoder.model_path
    assert path.exists() and path.parent.parent == cache_dir
    stamp = os.stat(path).st_mtime_ns

    def no_export(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cached model should have been reused")

    monkeypatch.setattr(enc_mod, "export_onnx", no_export)
    monkeypatch.setattr(enc_mod, "quantise_int8", no_export)
    again = OnnxInt8Encoder("minilm", cache_dir=cache_dir)
    assert again.built is False and again.model_path == path
    assert os.stat(path).st_mtime_ns == stamp
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    np.testing.assert_allclose(again.encode(SENTENCES), int8_encoder.encode(SENTENCES), atol=1e-6)


@pytest.mark.integration
def test_encoders_report_progress_with_rising_counts(
    st_encoder: SentenceTransformerEncoder, fp32_encoder: OnnxEncoder
) -> None:
    texts = [f"Sentence number {i} about a river and a city." for i in range(21)]
    for enc, batch_size in ((fp32_encoder, 4), (st_encoder, 1)):
        seen: list[tuple[int, int]] = []
        vecs = enc.encode(texts, batch_size=batch_size, on_progress=lambda d, t, seen=seen: seen.append((d, t)))
        done = [d for d, _ in seen]
        assert len(seen) >= 3 and done == sorted(done) and len(set(done)) == len(done), enc.backend
        assert seen[-1] == (21, 21) and {t for _, t in seen} == {21}
        plain = enc.encode(texts, batch_size=batch_size)
        assert (vecs * plain).sum(axis=1).min() >= 0.9999  # reporting does not change the vectors
