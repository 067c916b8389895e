"""The LangChain and LlamaIndex retrievers return the passages ``tandem retrieve`` prints, for 5 dev500
questions and every retriever kind: bm25 and graph over the whole dev500 pool, dense and hybrid (the
embedded MiniLM) over the pool of the first 10 questions; from the index folder and from a running
``tandem serve``."""

from __future__ import annotations

import asyncio
import json

import pytest
from tests.conftest import shared
from typer.testing import CliRunner

from tandem.cli import app
from tandem.corpus import load_dataset
from tandem.index import build_index
from tandem.index.passage_graph import GraphExtra
from tandem.integrations import langchain as lc
from tandem.integrations import llamaindex as li
from tandem.server.app import create_app
from tandem.server.engine import Engine
from tandem.testing.fake_llm import FakeLLM
from tandem.testing.serving import serving

pytestmark = pytest.mark.integration
QUESTIONS = (0, 100, 200, 300, 400)  # bridge (0-249) and comparison (250-499) questions
K = 5


@pytest.fixture(scope="module")
def dev500(tmp_path_factory):
    ds = load_dataset(shared("hotpotqa/dev500.jsonl"))
    root = tmp_path_factory.mktemp("dev500")
    build_index(ds.passages, root / "pool", kind="bm25", extras=[GraphExtra()])
    first = {d for q in ds.questions[:10] for d in q.metadata["context_ids"]}
    build_index([p for p in ds.passages if p.id in first], root / "small", kind="hybrid")
    engine = Engine({"pool": root / "pool", "small": root / "small"}, FakeLLM(default="unused"), method="naive_rag")
    with serving(create_app(engine)) as url:
        yield ds, root, url
    engine.close()


def cli_retrieve(folder, kind: str, query: str) -> list[tuple[str, float]]:
    res = CliRunner().invoke(app, ["retrieve", "--index", str(folder), "--retriever", kind, "-k", str(K), "--json", query])
    assert res.exit_code == 0, res.output
    return [(h["id"], h["score"]) for h in json.loads(res.stdout)["hits"]]


@pytest.mark.parametrize(("kind", "name"), [("bm25", "pool"), ("graph", "pool"), ("dense", "small"), ("hybrid", "small")])
def test_retrievers_return_what_tandem_retrieve_prints(dev500, kind, name):
    ds, root, url = dev500
    questions = [ds.questions[i].text for i in QUESTIONS] if name == "pool" else [q.text for q in ds.questions[:10:2]]
    retrievers = {
        "langchain folder": lc.TandemRetriever(source=str(root / name), retriever=kind, k=K),
        "langchain server": lc.TandemRetriever(source=url, index=name, retriever=kind, k=K),
        "llamaindex folder": li.TandemRetriever(str(root / name), retriever=kind, k=K),
        "llamaindex server": li.TandemRetriever(url, index=name, retriever=kind, k=K),
    }
    for question in questions:
        expected = cli_retrieve(root / name, kind, question)
        assert len(expected) == K
        for label, retriever in retrievers.items():
            if label.startswith("langchain"):
                docs = asyncio.run(retriever.ainvoke(question)) if "server" in label else retriever.invoke(question)
                got = [(d.id, d.metadata["score"]) for d in docs]
            else:
                nodes = asyncio.run(retriever.aretrieve(question)) if "server" in label else retriever.retrieve(question)
                got = [(n.node.node_id, n.score) for n in nodes]
            assert [i for i, _ in got] == [i for i, _ in expected], (label, question)
            assert [s for _, s in got] == pytest.approx([s for _, s in expected], rel=1e-5), (label, question)
