"""The LangChain and LlamaIndex adapters with the real ``langchain-core`` and ``llama-index-core``, over
an index folder and over a running ``tandem serve`` (uvicorn on loopback), with the fake LLM: the
retrievers, the method as a Runnable in a chain and as a query engine, and their errors."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tandem.corpus import load_corpus
from tandem.errors import ConfigError
from tandem.index import build_index
from tandem.integrations import langchain as lc
from tandem.integrations import llamaindex as li
from tandem.integrations.base import ServerError, open_search
from tandem.server.app import create_app
from tandem.server.engine import Engine
from tandem.testing.fake_llm import FakeLLM
from tandem.testing.serving import free_port, serving

ROOT = Path(__file__).resolve().parents[2]
DEMO_QUESTION = "In which city was the wife of Pierre Curie born?"  # scripts/demo.sh


def reading_llm() -> FakeLLM:
    """Answers Warsaw only when the prompt shows the passage that says so: the answer depends on retrieval."""
    return FakeLLM(rules=[("Marie Curie was born in Warsaw", "Warsaw")], default="I do not know", match="prompt")


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("demo") / "index"
    build_index(load_corpus(ROOT / "examples" / "demo_corpus"), folder, kind="bm25")
    return folder


@pytest.fixture(scope="module")
def server(demo):
    engine = Engine({"demo": demo}, reading_llm(), method="naive_rag")
    with serving(create_app(engine)) as url:
        yield url
    engine.close()


def test_langchain_retriever_folder_and_server_agree_sync_and_async(demo, server):
    local = lc.TandemRetriever(source=str(demo), k=3)
    remote = lc.TandemRetriever(source=server, k=3, index="demo", retriever="bm25")
    docs = local.invoke("Where was Marie Curie born?")
    assert [d.id for d in docs] == ["warsaw.md#0", "marie_curie.md#0", "pierre_curie.md#0"]
    assert docs[0].metadata["title"] == "Warsaw" and docs[0].metadata["rank"] == 1
    assert docs[0].metadata["score"] > docs[1].metadata["score"] and "Warsaw" in docs[0].page_content
    for other in (remote.invoke("Where was Marie Curie born?"), asyncio.run(local.ainvoke("Where was Marie Curie born?")),
                  asyncio.run(remote.ainvoke("Where was Marie Curie born?"))):
        assert [(d.id, d.page_content) for d in other] == [(d.id, d.page_content) for d in docs]
        assert [d.metadata["score"] for d in other] == pytest.approx([d.metadata["score"] for d in docs])


def test_llamaindex_retriever_folder_and_server_agree_sync_and_async(demo, server):
    local = li.TandemRetriever(str(demo), k=2)
    remote = li.TandemRetriever(server, k=2)
    nodes = local.retrieve("the Vistula river")
    assert [n.node.node_id for n in nodes] == ["vistula.md#0", "warsaw.md#0"]
    assert nodes[0].node.metadata["title"] == "Vistula" and nodes[0].score > nodes[1].score
    for other in (remote.retrieve("the Vistula river"), asyncio.run(local.aretrieve("the Vistula river")),
                  asyncio.run(remote.aretrieve("the Vistula river"))):
        assert [(n.node.node_id, n.node.get_content()) for n in other] == [(n.node.node_id, n.node.get_content()) for n in nodes]
        assert [n.score for n in other] == pytest.approx([n.score for n in nodes])


@pytest.mark.parametrize("where", ["folder", "server"])
def test_langchain_chain_with_the_method_runnable_answers_the_demo_question(demo, server, where):
    from langchain_core.runnables import RunnableLambda, RunnablePassthrough

    source = str(demo) if where == "folder" else server
    method = lc.method_runnable(source, "naive_rag", llm=reading_llm(), settings={"k": 3})
    chain = ({"question": RunnablePassthrough()} | method
             | RunnableLambda(lambda r: f"{r['answer']} [{', '.join(d.metadata['title'] for d in r['sources'])}]"))
    assert chain.invoke(DEMO_QUESTION) == "Warsaw [Warsaw, Pierre Curie, Marie Curie]"  # the top 3 of bm25
    result = asyncio.run(method.ainvoke(DEMO_QUESTION))
    assert result["answer"] == "Warsaw" and result["method"] == "naive_rag" and result["cost"]["llm_calls"] == 1
    assert result["trace"]["steps"][0]["queries"] == [DEMO_QUESTION]
    blind = lc.method_runnable(source, "naive_rag", llm=reading_llm(), settings={"k": 1})  # Warsaw's page only
    assert blind.invoke({"question": DEMO_QUESTION})["answer"] == "I do not know"


@pytest.mark.parametrize("where", ["folder", "server"])
def test_llamaindex_query_engine_returns_the_answer_with_source_nodes(demo, server, where):
    source = str(demo) if where == "folder" else server
    engine = li.TandemQueryEngine(source, "naive_rag", llm=reading_llm(), settings={"k": 3})
    response = engine.query(DEMO_QUESTION)
    assert str(response) == "Warsaw"
    assert [n.node.metadata["title"] for n in response.source_nodes] == ["Warsaw", "Pierre Curie", "Marie Curie"]
    assert response.metadata["method"] == "naive_rag" and response.metadata["trace"]["steps"]
    assert str(asyncio.run(engine.aquery(DEMO_QUESTION))) == "Warsaw"


def test_a_server_with_an_api_key(demo):
    engine = Engine({"demo": demo}, reading_llm(), method="naive_rag")
    with serving(create_app(engine, api_key="s3cret-key")) as url:
        with pytest.raises(ConfigError, match="answered 401: missing or wrong API key") as caught:
            lc.TandemRetriever(source=url, api_key="wrong").invoke("Warsaw")
        assert "s3cret" not in str(caught.value)
        assert li.TandemRetriever(url, api_key="s3cret-key", k=1).retrieve("Vistula")[0].node.node_id == "vistula.md#0"
        answer = lc.method_runnable(url, "naive_rag", api_key="s3cret-key", settings={"k": 3}).invoke(DEMO_QUESTION)
        assert answer["answer"] == "Warsaw"
    engine.close()


def test_bad_input_is_a_clear_error(demo, server):
    with pytest.raises(ConfigError, match="unknown retriever 'nope'"):
        lc.TandemRetriever(source=str(demo), retriever="nope")
    with pytest.raises(ConfigError, match="cannot serve a dense retriever"):
        li.TandemRetriever(str(demo), retriever="dense")
    with pytest.raises(ConfigError, match="apply to an index folder"):
        open_search(server, seeds=3)
    with pytest.raises(ConfigError, match=r"answered 404: unknown index 'nope'"):
        lc.TandemRetriever(source=server, index="nope").invoke("Warsaw")
    with pytest.raises(ServerError, match="ConnectError"):
        li.TandemRetriever(f"http://127.0.0.1:{free_port()}").retrieve("Warsaw")
    with pytest.raises(ConfigError, match="'reranker_model' loads a model or file"):
        lc.method_runnable(str(demo), "naive_rag", llm=reading_llm(), settings={"reranker_model": "/etc/passwd"})
    with pytest.raises(ConfigError, match="unknown method 'nope'"):
        li.TandemQueryEngine(str(demo), "nope", llm=reading_llm())
    with pytest.raises(ConfigError, match="takes a question"):
        lc.method_runnable(str(demo), "naive_rag", llm=reading_llm()).invoke(42)
    with pytest.raises(ConfigError, match="answered 422: unknown method 'nope'"):
        li.TandemQueryEngine(server, "nope").query(DEMO_QUESTION)
