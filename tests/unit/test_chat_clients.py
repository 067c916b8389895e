"""The OpenAI-compatible endpoint as LangChain's and LlamaIndex's OpenAI chat clients use it: a method is a
model, the answer comes back whole and streamed."""

from __future__ import annotations

import pytest

from tandem.index import build_index
from tandem.server.app import create_app
from tandem.server.engine import Engine
from tandem.testing.fake_llm import FakeLLM
from tandem.testing.serving import serving

QUESTION = "Where was Marie Curie born?"
KEY = "chat-key"


@pytest.fixture
def url(tmp_path, small_docs):
    build_index(small_docs, tmp_path / "demo", kind="bm25")
    engine = Engine({"demo": tmp_path / "demo"}, FakeLLM(rules=[("Marie Curie", "Warsaw")], default="unknown"),
                    method="naive_rag")
    with serving(create_app(engine, api_key=KEY)) as base:
        yield f"{base}/v1"
    engine.close()


def test_langchain_chat_openai(url):
    langchain_openai = pytest.importorskip("langchain_openai")
    chat = langchain_openai.ChatOpenAI(model="naive_rag", base_url=url, api_key=KEY, temperature=0, max_retries=0)
    reply = chat.invoke(QUESTION)
    assert reply.content == "Warsaw"
    assert "".join(chunk.content for chunk in chat.stream(QUESTION)) == "Warsaw"
    ircot = langchain_openai.ChatOpenAI(model="ircot", base_url=url, api_key=KEY, max_retries=0,
                                        extra_body={"settings": {"max_steps": 1}})
    assert ircot.invoke([("system", "Be brief."), ("user", QUESTION)]).content


def test_llamaindex_openai_like(url):
    openai_like = pytest.importorskip("llama_index.llms.openai_like")
    from llama_index.core.llms import ChatMessage

    llm = openai_like.OpenAILike(model="naive_rag", api_base=url, api_key=KEY, is_chat_model=True, max_retries=0)
    reply = llm.chat([ChatMessage(role="user", content=QUESTION)])
    assert reply.message.content == "Warsaw"
    streamed = list(llm.stream_chat([ChatMessage(role="user", content=QUESTION)]))
    assert streamed[-1].message.content == "Warsaw"
