"""One folder adds a method, a retriever and an LLM backend: a package outside tandem, named in $TANDEM_PLUGINS,
with no file of tandem edited. The method then answers through `tandem eval qa` (with the folder's retriever
and LLM backend), the HTTP server and MCP."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap

import httpx
import pytest
from mcp import Client

from tandem.registry import LLMS, METHODS, RETRIEVERS
from tandem.server.app import create_app
from tandem.server.engine import Engine
from tandem.server.mcp import create_mcp
from tandem.testing.serving import serving

FILES = {
    "__init__.py": '''
        """A plugin folder: one method, one retriever, one LLM backend."""
        from toyplug import echo, method, titles  # noqa: F401 - each registers itself
    ''',
    "method.py": '''
        from pydantic import Field

        from tandem.methods.parts import Parts
        from tandem.registry import METHODS
        from tandem.settings import Settings
        from tandem.llm.base import LLMRequest, Message
        from tandem.types import Answer, Step, Trace


        class ToySettings(Settings):
            """Toy: the LLM told the first hit's title."""

            k: int = Field(1, ge=1, le=5, description="hits looked at")


        class Toy:
            def __init__(self, llm, search, settings):
                self.llm, self.search, self.settings = llm, search, settings

            def answer(self, question):
                hits = self.search.retriever.search(question.text, self.settings.k)
                title = self.search.store.get(hits[0].doc_id).title if hits else ""
                reply = self.llm.complete(LLMRequest([Message("user", title)], max_tokens=8))
                return Answer(question.id, reply.text, Trace(steps=[Step("toy", queries=[question.text], hits=hits)]))


        @METHODS.register("toy", settings=ToySettings, needs=("index",))
        def build(parts: Parts, s: ToySettings) -> Toy:
            return Toy(parts.llm, parts.need_search("toy"), s)
    ''',
    "titles.py": '''
        from tandem.registry import RETRIEVERS
        from tandem.types import Hit


        class Titles:
            """Documents whose title shares a word with the query, in store order."""

            name = "titles"

            def __init__(self, index):
                self.docs = list(index.store.docs)

            def search(self, query, k=10):
                words = set(query.lower().replace("?", "").split())
                found = [d for d in self.docs if words & set(d.title.lower().split())]
                return [Hit(d.id, 1.0, i + 1, self.name) for i, d in enumerate(found[:k])]

            def search_batch(self, queries, k=10):
                return [self.search(q, k) for q in queries]


        @RETRIEVERS.register("titles", doc="title words shared with the query")
        def build(index, settings):
            return Titles(index)
    ''',
    "echo.py": '''
        from tandem.llm.base import LLMResponse
        from tandem.registry import LLMS


        class Echo:
            """Replies with the last message, upper-cased."""

            def __init__(self, spec):
                self.spec, self.name = spec, "echo"

            def complete(self, req):
                text = req.messages[-1].content.upper()
                return LLMResponse(text, 1, 1, 0.0, "stop", self.name)


        @LLMS.register("echo", doc="replies with the last message, upper-cased")
        def build(arg, spec, options):
            return Echo(spec)
    ''',
}


@pytest.fixture
def plugin_folder(tmp_path, monkeypatch):
    root = tmp_path / "plugins"
    (root / "toyplug").mkdir(parents=True)
    for name, text in FILES.items():
        (root / "toyplug" / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("TANDEM_PLUGINS", "toyplug")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    import toyplug  # noqa: F401 - registers them in this process (the registries are loaded already)

    yield root
    for registry, name in ((METHODS, "toy"), (RETRIEVERS, "titles"), (LLMS, "echo")):
        registry.remove(name)
    for module in [m for m in sys.modules if m == "toyplug" or m.startswith("toyplug.")]:
        sys.modules.pop(module)


def test_one_folder_adds_a_method_a_retriever_and_a_backend_on_every_surface(plugin_folder, index_dir, tmp_path):
    dataset = tmp_path / "qa.jsonl"
    rows = [{"id": "q1", "question": "Where was Marie Curie born?", "answers": ["MARIE CURIE"]},
            {"id": "q2", "question": "What river is Warsaw on?", "answers": ["Vistula"]}]
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "tandem.cli", "eval", "qa", "--method", "toy", "--retriever", "titles",
                           "--llm", "echo", "--dataset", str(dataset), "--index", str(index_dir), "--out", str(run)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    assert [r["prediction"] for r in records] == ["MARIE CURIE", "WARSAW"]  # the folder's LLM, over its retriever
    assert {h["source"] for r in records for h in r["trace"]["steps"][0]["hits"]} == {"titles"}
    assert json.loads((run / "metrics.json").read_text())["em"] == 0.5

    engine = Engine({"demo": index_dir}, "echo", method="toy")
    with serving(create_app(engine)) as url:
        reply = httpx.post(f"{url}/v1/ask", json={"question": "Where was Marie Curie born?", "method": "toy"}).json()
        assert reply["answer"] == "MARIE CURIE" and reply["trace"]["steps"][0]["name"] == "toy"
        found = httpx.post(f"{url}/v1/retrieve", json={"query": "Paris?", "retriever": "titles", "k": 3}).json()
        assert [(h["doc_id"], h["source"]) for h in found["hits"]] == [("d5", "titles")]

    async def over_mcp() -> str:
        async with Client(create_mcp(engine)) as client:
            answered = await client.call_tool("ask", {"question": "What river is Warsaw on?", "method": "toy"})
            return answered.structured_content["answer"]

    assert asyncio.run(over_mcp()) == "WARSAW"
    engine.close()
