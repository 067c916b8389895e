"""The local backend's choice of engine for a GGUF: OpenVINO reads it itself, else its export, else torch -
each fallback one warning line, none where the user named the weights."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from tandem.errors import ConfigError, LLMError
from tandem.llm import local


class _Engine(SimpleNamespace):
    pass


@pytest.fixture
def gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF")
    seen: dict = {"ov": [], "torch": []}

    def ovllm(model_dir, folder, **kw):
        seen["ov"].append(Path(model_dir))
        return _Engine(kind="openvino", path=Path(model_dir), weights_dir=kw.get("weights_dir"))

    def native(folder, gguf, cache_dir=None):
        if seen.get("native_fails"):
            raise LLMError("OpenVINO could not read model.gguf (exit 1): RuntimeError: [load_gguf] gguf_tensor_to_f16 failed")
        return tmp_path / "native-ir"

    def exported(folder, weights, cache_dir=None, gguf=None):
        if seen.get("export_fails"):
            raise LLMError("exporting failed (exit 1): Traceback ...\nValueError: Maximum required is 5.0, got: 5.5.4")
        return tmp_path / f"export-{weights}"

    monkeypatch.setattr(local, "gguf_has_q4_1", lambda *a: False)
    monkeypatch.setattr(local, "ensure_tokenizer", lambda *a: tmp_path / "tokenizer")
    monkeypatch.setattr(local, "ensure_converted", lambda *a: tmp_path / "converted")
    monkeypatch.setattr(local, "openvino_missing", lambda: None)
    monkeypatch.setattr(local, "exporter_python", lambda: Path("/usr/bin/python3"))
    monkeypatch.setattr(local, "ensure_exported", exported)
    monkeypatch.setattr(local, "ensure_native", native)
    monkeypatch.setattr(local, "HFLLM", lambda folder, **kw: _Engine(kind="torch", path=Path(folder)))
    monkeypatch.setattr("tandem.llm.ov_engine.OVLLM", ovllm)
    seen["path"] = path
    return seen


def test_a_gguf_openvino_reads_runs_on_the_file_itself(gguf, caplog):
    llm = local.load_local(str(gguf["path"]))
    assert llm.kind == "openvino" and llm.path.name == "native-ir" and llm.answer_style == "instruction"
    assert callable(llm.weights_dir)  # the weights are converted only when the torch path asks
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_quantisation_the_reader_lacks_is_exported_instead_with_one_warning(gguf, caplog):
    gguf["native_fails"] = True
    with caplog.at_level(logging.WARNING):
        llm = local.load_local(str(gguf["path"]))
    assert llm.kind == "openvino" and llm.path.name == "export-fp16"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "cannot read model.gguf itself (" in warnings[0] and "gguf_tensor_to_f16" in warnings[0]


def test_neither_reader_nor_export_falls_back_to_torch_with_one_warning_and_no_traceback(gguf, caplog):
    gguf["native_fails"] = gguf["export_fails"] = True
    with caplog.at_level(logging.WARNING):
        llm = local.load_local(str(gguf["path"]), answer_style="system")
    assert llm.kind == "torch" and llm.answer_style == "system"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "export failed (ValueError: Maximum required is 5.0" in warnings[0]
    assert "Traceback" not in warnings[0] and "torch engine" in warnings[0]


def test_weights_named_by_the_user_never_fall_back(gguf):
    gguf["native_fails"] = True
    with pytest.raises(LLMError, match="gguf_tensor_to_f16"):
        local.load_local(str(gguf["path"]), weights="gguf")


def test_named_weights_whose_export_fails_raise_instead_of_running_torch(gguf):
    gguf["export_fails"] = True
    with pytest.raises(LLMError, match="Maximum required is 5.0"):
        local.load_local(str(gguf["path"]), weights="fp16")


def test_no_export_environment_falls_back_to_torch_with_one_warning(gguf, monkeypatch, caplog):
    gguf["native_fails"] = True

    def no_exporter(*a, **k):
        raise ConfigError("the openvino engine needs its export environment once per model (optimum-intel)")

    monkeypatch.setattr(local, "ensure_exported", no_exporter)
    with caplog.at_level(logging.WARNING):
        llm = local.load_local(str(gguf["path"]))
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert llm.kind == "torch" and len(warnings) == 1 and "export environment" in warnings[0]


def test_an_unknown_answer_style_is_refused_before_loading(gguf):
    with pytest.raises(ConfigError, match="unknown answer_style 'terse'"):
        local.load_local(str(gguf["path"]), answer_style="terse")
    assert gguf["ov"] == []
