"""One cache root for every tandem cache: TANDEM_CACHE, then XDG_CACHE_HOME/tandem, then ~/.cache/tandem."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.index.encoder import encoder_cache_dir
from tandem.llm.local import converted_dir
from tandem.model_files import cache_root


@pytest.fixture()
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in ("TANDEM_CACHE", "TANDEM_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


def test_default_is_under_the_home_cache(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert cache_root() == tmp_path / "home" / ".cache" / "tandem"
    assert cache_root("models", "x") == tmp_path / "home" / ".cache" / "tandem" / "models" / "x"
    assert not cache_root().exists()  # nothing is created


def test_xdg_cache_home_beats_the_default(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "tandem"


def test_tandem_cache_beats_xdg_and_the_older_name(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    clean_env.setenv("TANDEM_CACHE_DIR", str(tmp_path / "old"))
    assert cache_root() == tmp_path / "old"
    clean_env.setenv("TANDEM_CACHE", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"
    clean_env.setenv("TANDEM_CACHE", "")  # empty: as if unset
    assert cache_root() == tmp_path / "old"


def test_every_cache_lives_under_the_root(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # the converted LLMs once ignored it
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"gguf")
    assert encoder_cache_dir() == tmp_path / "xdg" / "tandem" / "encoders"
    assert converted_dir("smollm2", gguf).parent == tmp_path / "xdg" / "tandem" / "models"
