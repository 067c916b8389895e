"""docs/integrations.md's examples, run as written: its index commands (through the CLI), then every
``python`` block, with the fake LLM in place of ``local`` and a server of the test's own in place of
port 8000 (the page says so)."""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tandem.cli import app
from tandem.server.app import create_app
from tandem.server.engine import Engine
from tandem.testing.fake_llm import FakeLLM
from tandem.testing.serving import serving

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE, re.S)
FAKE = "fake:Warsaw"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A folder holding the page's index, built by the page's own commands (``examples/`` linked in)."""
    folder = tmp_path_factory.mktemp("docs")
    (folder / "examples").symlink_to(ROOT / "examples")
    commands = [line.split("#")[0].strip() for line in re.search(r"```bash\n(.*?)```", PAGE, re.S).group(1).splitlines()]
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        for command in filter(None, commands):
            args = shlex.split(command)
            assert args[0] == "tandem"
            res = CliRunner().invoke(app, args[1:])
            assert res.exit_code == 0, (command, res.output)
    finally:
        os.chdir(cwd)
    return folder


def test_the_page_has_an_example_for_each_integration():
    assert len(BLOCKS) == 4
    assert "from mcp import Client" in BLOCKS[0] and "tandem.integrations.langchain" in BLOCKS[1]
    assert "tandem.integrations.llamaindex" in BLOCKS[2] and "http://127.0.0.1:8000" in BLOCKS[3]
    assert all(len(b.strip().splitlines()) <= 16 for b in BLOCKS)


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_example_runs_as_written(workdir, number, monkeypatch, capfd):
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")  # `tandem`
    engine = Engine({"demo": workdir / "indexes" / "demo"}, FakeLLM(default="Warsaw"), method="naive_rag")
    with serving(create_app(engine)) as url:
        code = BLOCKS[number].replace('"local"', f'"{FAKE}"').replace("http://127.0.0.1:8000", url)
        exec(compile(code, f"docs/integrations.md block {number + 1}", "exec"), {"__name__": "__main__"})
    engine.close()
    printed = capfd.readouterr().out
    assert "Warsaw" in printed and "Marie Curie" in printed, printed
    if number == 0:
        assert "['ask', 'list_indexes', 'list_methods', 'search']" in printed
    if number in (1, 2):
        assert re.search(r"^marie_curie\.md#0 Marie Curie \d+\.\d+$", printed, re.M), printed
