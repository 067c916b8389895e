"""The docs' settings tables are the settings models' (scripts/docs_settings.py writes them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tandem.errors import ConfigError
from tandem.methods.cooprag.settings import CoopRAGSettings
from tandem.methods.dualrag.settings import DualRAGSettings
from tandem.methods.genground.settings import GenGroundSettings

ROOT = Path(__file__).resolve().parents[2]


def test_every_settings_table_in_the_docs_matches_its_settings_model():
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "docs_settings.py"), "--check"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    tables = sum(p.read_text(encoding="utf-8").count("<!-- settings: ") for p in (ROOT / "docs").rglob("*.md"))
    assert tables >= 10  # the methods' and the stores' tables


def test_a_stale_table_is_named(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import docs_settings
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    doc = tmp_path / "m.md"
    doc.write_text("<!-- settings: methods/direct -->\n| old |\n<!-- /settings -->\n", encoding="utf-8")
    monkeypatch.setattr(docs_settings, "ROOT", tmp_path)
    assert docs_settings.stale([doc]) == ["m.md: methods/direct"]
    doc.write_text(docs_settings.render(doc.read_text(encoding="utf-8")), encoding="utf-8")
    assert docs_settings.stale([doc]) == [] and "`max_tokens` | int | `32`" in doc.read_text(encoding="utf-8")


def test_one_name_per_concept_and_the_old_names_still_work(caplog):
    """First-stage depth is ``candidates`` and documents kept ``k`` in every method; the old names are taken
    with a deprecation message for one release."""
    with caplog.at_level("WARNING", logger="tandem"):
        old = DualRAGSettings.from_dict({"topk": 20, "rerank_topk": 4})
    assert (old.candidates, old.k) == (20, 4) and "'topk' is now called 'candidates'" in caplog.text
    assert GenGroundSettings.from_dict({"rerank_topk": 6}).k == 6
    assert CoopRAGSettings.from_dict({"n": 40, "k": 5}).candidates == 40
    with pytest.raises(ConfigError, match="'n' is the old name of 'candidates': give only 'candidates'"):
        CoopRAGSettings.from_dict({"n": 40, "candidates": 50})
    with pytest.raises(ConfigError, match="must not exceed candidates"):
        CoopRAGSettings.from_dict({"candidates": 3, "k": 5})
