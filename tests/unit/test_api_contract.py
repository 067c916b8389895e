"""The HTTP API's written contract holds: schemathesis finds no failure against a live server, OpenAI clients
list the methods, and a method added in one file with one registry line shows on every surface."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from tandem.errors import ConfigError
from tandem.registry import METHODS
from tandem.server.app import create_app
from tandem.server.engine import Engine
from tandem.testing.fake_llm import FakeLLM
from tandem.testing.serving import serving

KEY = "contract-key"


def test_schemathesis_finds_no_failure(index_dir, tmp_path):
    """Every operation, generated from the OpenAPI schema (bounded examples, loopback only, API key set):
    no 5xx, no schema-valid request refused, no invalid one accepted, responses and headers as documented."""
    beside = Path(sys.executable).parent / "schemathesis"
    cli = str(beside) if beside.is_file() else shutil.which("schemathesis")
    if cli is None:
        pytest.skip("schemathesis is not installed (pip install -e '.[dev]')")
    engine = Engine({"demo": index_dir}, FakeLLM(default="Warsaw"), method="naive_rag", workers=2, max_queue=64,
                    uploads=tmp_path / "uploads")
    with serving(create_app(engine, api_key=KEY, max_question=500)) as url:
        run = subprocess.run([cli, "run", f"{url}/openapi.json", "--checks", "all", "--max-examples", "8",
                              "--seed", "7", "--no-color", "-H", f"Authorization: Bearer {KEY}"],
                             capture_output=True, text=True, timeout=600)
    engine.close()
    report = run.stdout[-6000:] + run.stderr[-2000:]
    assert run.returncode == 0 and "No issues found" in run.stdout, report
    assert "Selected: 10/10" in run.stdout, report  # every route was exercised, uploads and jobs included


def test_openai_sdk_lists_the_methods_as_models(index_dir):
    openai = pytest.importorskip("openai")
    engine = Engine({"demo": index_dir}, FakeLLM(default="Warsaw"), method="naive_rag")
    with serving(create_app(engine, api_key=KEY)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY)
        served = {m.id for m in client.models.list()}
        assert {"naive_rag", "ircot", "dualrag"} <= served
        assert "oracle" not in served and "r2ag" not in served  # gold passages / a checkpoint: not servable here
        reply = client.chat.completions.create(model="ircot", messages=[{"role": "user", "content": "Who?"}],
                                               extra_body={"settings": {"max_steps": 1}})
        assert reply.model == "ircot" and reply.choices[0].message.content
        with pytest.raises(openai.NotFoundError, match="unknown model 'nope'"):
            client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "Who?"}])
    engine.close()


TOY = '''
"""A toy method: answers with the title of the first passage its search finds."""

from pydantic import Field

from tandem.methods.parts import Parts
from tandem.registry import METHODS
from tandem.settings import Settings
from tandem.types import Answer, Step, Trace


class ToySettings(Settings):
    """Toy: the first hit's title."""

    k: int = Field(1, ge=1, le=5, description="hits looked at")


class Toy:
    def __init__(self, search, settings):
        self.search, self.settings = search, settings

    def answer(self, question):
        hits = self.search.retriever.search(question.text, self.settings.k)
        title = self.search.store.get(hits[0].doc_id).title if hits else ""
        return Answer(question.id, title, Trace(steps=[Step("toy", queries=[question.text], hits=hits)]))


@METHODS.register("toy", settings=ToySettings, needs=("index",))
def build(parts: Parts, s: ToySettings) -> Toy:
    return Toy(parts.need_search("toy"), s)
'''


@pytest.fixture
def toy_plugin(tmp_path, monkeypatch):
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "toy_method.py").write_text(textwrap.dedent(TOY))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("TANDEM_PLUGINS", "toy_method")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
    import toy_method  # noqa: F401 - registers "toy" in this process (the registry is loaded already)

    yield folder
    METHODS.remove("toy")
    sys.modules.pop("toy_method", None)


def test_a_method_in_one_file_shows_on_every_surface(toy_plugin, index_dir):
    tandem = [sys.executable, "-m", "tandem.cli"]
    listed = subprocess.run([*tandem, "methods", "--json"], capture_output=True, text=True, timeout=120)
    assert "toy" in json.loads(listed.stdout), listed.stderr
    described = subprocess.run([*tandem, "methods", "toy", "--json"], capture_output=True, text=True, timeout=120)
    assert json.loads(described.stdout)["settings"]["k"] == {"type": "int", "default": 1, "doc": "hits looked at"}
    asked = subprocess.run([*tandem, "ask", "--method", "toy", "--index", str(index_dir), "--llm", "fake:x", "--json",
                            "Where was Marie Curie born?"], capture_output=True, text=True, timeout=120)
    assert asked.returncode == 0, asked.stderr
    assert json.loads(asked.stdout)["answer"]
    bad = subprocess.run([*tandem, "ask", "--method", "toy", "--index", str(index_dir), "--llm", "fake:x",
                          "--set", "kk=2", "Where?"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown setting 'kk'; valid settings: ['k']" in bad.stderr

    engine = Engine({"demo": index_dir}, FakeLLM(default="Warsaw"), method="naive_rag")
    with serving(create_app(engine)) as url:
        methods = httpx.get(f"{url}/v1/methods").json()["methods"]
        assert any(m["name"] == "toy" and m["served"] for m in methods)
        assert "toy" in {m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]}
        schema = httpx.get(f"{url}/openapi.json").json()["components"]["schemas"]
        assert schema["ToyRequestSettings"]["properties"]["k"]["maximum"] == 5
        reply = httpx.post(f"{url}/v1/ask", json={"question": "Where was Marie Curie born?", "method": "toy",
                                                        "settings": {"k": 2}}).json()
        assert reply["method"] == "toy" and reply["trace"]["steps"][0]["name"] == "toy"
        assert httpx.post(f"{url}/v1/ask", json={"question": "Q?", "method": "toy",
                                                       "settings": {"k": 9}}).status_code == 422
    engine.close()


def test_a_plugin_that_cannot_be_imported_is_named(monkeypatch):
    from tandem.registry import Registry

    monkeypatch.setenv("TANDEM_PLUGINS", "no_such_plugin_module")
    with pytest.raises(ConfigError, match="TANDEM_PLUGINS names 'no_such_plugin_module', which cannot be imported"):
        Registry("thing", ()).names()


def test_no_import_circle_in_the_package():
    """The module graph of src/tandem (every import run, lazy ones included; not those for type checkers only)
    has no cycle."""
    import ast

    root = Path(__import__("tandem").__file__).parent
    modules = {".".join(p.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"): p
               for p in root.rglob("*.py")}

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and getattr(block.test, "id", getattr(block.test, "attr", "")) == "TYPE_CHECKING"
                       for stmt in block.body for n in ast.walk(stmt)}  # annotations only: not run
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                    + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            graph[name] |= {t for t in map(owner, targets) if t and t != name}
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    names = sorted(graph)
    at = {n: i for i, n in enumerate(names)}
    rows = [at[a] for a in names for b in graph[a]]
    cols = [at[b] for a in names for b in graph[a]]
    count, labels = connected_components(csr_matrix(([1] * len(rows), (rows, cols)), shape=(len(names),) * 2),
                                         directed=True, connection="strong")
    circles = [[n for n in names if labels[at[n]] == c] for c in range(count)]
    assert [c for c in circles if len(c) > 1] == []
    assert not any(t.startswith("tandem.testing") for m, ts in graph.items() if not m.startswith("tandem.testing")
                   for t in ts), "a production module imports tandem.testing"


def test_the_server_runs_the_local_model_in_an_engine_process_unless_told(index_dir, monkeypatch):
    """`tandem serve` / `tandem mcp` ask the embedded engine for a process of its own (its steps hold the
    GIL, which would stall the handlers); a user's own choice stands, and other backends get no such option."""
    from tandem.server import engine as server_engine

    seen: list[tuple[str, dict]] = []

    def load(spec: str, **opts):
        seen.append((spec, opts))
        return FakeLLM(default="Warsaw")

    monkeypatch.setattr(server_engine, "load_llm", load)
    for spec, opts in (("local", {}), ("local:/models/other.gguf", {"engine_process": False}), ("fake", {})):
        Engine({"demo": index_dir}, spec, method="naive_rag", llm_opts=opts).close()
    assert seen == [("local", {"engine_process": True}), ("local:/models/other.gguf", {"engine_process": False}),
                    ("fake", {})]
