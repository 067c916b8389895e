"""The MCP server with the official ``mcp`` client SDK and the fake LLM: in process, over stdio
(``tandem mcp`` as a child process) and over streamable HTTP on loopback; bad input is a tool error
with a message and the server goes on answering."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time

import mcp
import pytest
from mcp import Client, StdioServerParameters

from tandem.server.engine import Engine
from tandem.server.mcp import create_mcp
from tandem.testing.fake_llm import FakeLLM
from tandem.testing.serving import free_port

QUESTION = "Where was Marie Curie born?"
TOOLS = {"search", "ask", "list_indexes", "list_methods"}


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


async def exercise(client: Client) -> dict:
    """What every transport must do: list the tools, search, ask (the fake LLM says Warsaw), refuse bad
    input with a message, and answer again after it."""
    tools = (await client.list_tools()).tools
    assert {t.name for t in tools} == TOOLS and all(t.annotations.read_only_hint for t in tools)
    found = await client.call_tool("search", {"query": QUESTION, "k": 2})
    assert not found.is_error
    passages = found.structured_content["passages"]
    assert [p["rank"] for p in passages] == [1, 2] and passages[0]["id"] == "d1" and passages[0]["title"] == "Marie Curie"
    assert passages[0]["score"] > passages[1]["score"] and "Warsaw" in passages[0]["text"]
    answered = await client.call_tool("ask", {"question": QUESTION, "method": "naive_rag", "settings": {"k": 2}})
    assert not answered.is_error, answered.content
    body = answered.structured_content
    assert body["answer"] == "Warsaw" and body["method"] == "naive_rag"
    assert [p["id"] for p in body["cited"]] == [p["id"] for p in passages]  # naive_rag reads its top-2
    assert body["evidence"][0]["queries"] == [QUESTION] and body["evidence"][0]["passages"][0]["title"] == "Marie Curie"
    assert body["cost"]["llm_calls"] == 1
    errors = {}
    for name, tool, args in [
        ("index", "search", {"query": QUESTION, "index": "nope"}),
        ("method", "ask", {"question": QUESTION, "method": "nope"}),
        ("file", "ask", {"question": QUESTION, "method": "naive_rag", "settings": {"reranker_model": "/etc/passwd"}}),
        ("path", "ask", {"question": QUESTION, "method": "ircot", "settings": {"policy": "../../etc/passwd"}}),
        ("k", "search", {"query": QUESTION, "k": 0}),
    ]:
        result = await client.call_tool(tool, args)
        assert result.is_error, (name, result)
        errors[name] = result.content[0].text
    again = await client.call_tool("ask", {"question": "Where is Warsaw?", "method": "naive_rag"})
    assert not again.is_error and again.structured_content["answer"] == "Warsaw"
    return errors


def check_errors(errors: dict) -> None:
    assert "unknown index 'nope'" in errors["index"] and "demo" in errors["index"]
    assert "unknown method 'nope'" in errors["method"] and "dualrag" in errors["method"]
    assert "'reranker_model' loads a model or file" in errors["file"]
    assert "Input should be 'replace' or 'accumulate'" in errors["path"]
    assert "greater than or equal to 1" in errors["k"]


def test_tools_answer_and_refuse_in_process(index_dir):
    engine = Engine({"demo": index_dir}, FakeLLM(default="Warsaw"), method="naive_rag")

    async def go():
        async with Client(create_mcp(engine, max_question=100)) as client:
            errors = await exercise(client)
            long = await client.call_tool("ask", {"question": "why " * 40})
            assert long.is_error and "the question has 160 characters; the limit is 100" in long.content[0].text
            indexes = (await client.call_tool("list_indexes", {})).structured_content
            assert indexes == {"default": "demo", "indexes": [{"name": "demo", "kind": "bm25", "documents": 5,
                                                               "encoder": None}]}
            methods = {m["name"]: m for m in (await client.call_tool("list_methods", {})).structured_content["methods"]}
            assert len(methods) == 10 and methods["dualrag"]["description"]
            max_iter = methods["dualrag"]["settings_schema"]["properties"]["max_iter"]
            assert max_iter["default"] == 5 and max_iter["type"] == "integer"
            assert "r2former" in methods["r2ag"]["refused"] and "r2former" not in methods["r2ag"]["settings_schema"]["properties"]
            one = (await client.call_tool("list_methods", {"method": "naive_rag"})).structured_content["methods"]
            assert [m["name"] for m in one] == ["naive_rag"] and one[0]["refused"] == ["first_stage", "min_score", "reranker", "reranker_model"]
            unknown = await client.call_tool("list_methods", {"method": "nope"})
            assert unknown.is_error and "unknown method 'nope'" in unknown.content[0].text
            read = await client.read_resource("passage://demo/d3")
            assert json.loads(read.contents[0].text) == {"id": "d3", "title": "Warsaw",
                                                         "text": "Warsaw is the capital of Poland on the Vistula river."}
            with pytest.raises(mcp.MCPError, match="no passage 'zz'"):
                await client.read_resource("passage://demo/zz")
            return errors

    check_errors(run(go()))


def test_stdio_server_started_by_the_client_sdk(index_dir):
    params = StdioServerParameters(command=sys.executable, args=[
        "-m", "tandem.cli", "mcp", "--index", f"demo={index_dir}", "--llm", "fake:Warsaw", "--method", "naive_rag"])

    async def go():
        async with Client(params) as client:
            return await exercise(client)

    check_errors(run(go()))


def test_streamable_http_on_loopback_with_an_api_key(index_dir, tmp_path):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    port = free_port()
    (tmp_path / "key").write_text("mcp-test-key-123\n")
    log = (tmp_path / "mcp.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "tandem.cli", "mcp", "--index", f"demo={index_dir}", "--llm",
                             "fake:Warsaw", "--method", "naive_rag", "--transport", "http", "--port", str(port),
                             "--api-key-file", str(tmp_path / "key")], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 90
        while True:
            assert proc.poll() is None, (tmp_path / "mcp.log").read_text()
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.time() < deadline, "the MCP server did not start listening in 90 s"
            time.sleep(0.2)

        url = f"http://127.0.0.1:{port}/mcp"
        assert httpx2.post(url, json={}).status_code == 401
        assert httpx2.post(url, json={}, headers={"Authorization": "Bearer wrong"}).status_code == 401

        async def go():
            async with Client(streamable_http_client(url, http_client=httpx2.AsyncClient(
                    headers={"Authorization": "Bearer mcp-test-key-123"}))) as client:
                return await exercise(client)

        check_errors(run(go()))
        assert proc.poll() is None  # still serving after the errors
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


def test_command_line_errors_name_the_problem(tmp_path):
    from typer.testing import CliRunner

    from tandem.cli import app
    from tandem.errors import TandemError

    for args, message in ([[], "give at least one --index"], [["--index", f"x={tmp_path / 'missing'}"], "missing"]):
        res = CliRunner().invoke(app, ["mcp", "--llm", "fake", *args])
        assert isinstance(res.exception, TandemError) and res.exception.exit_code == 2, res.output
        assert message in str(res.exception)


def test_ask_reports_each_step_as_progress_and_stops_when_the_client_gives_up(index_dir):
    def slow(request):
        time.sleep(0.25)
        return "Thought: I need more.\nQuery: Marie Curie birthplace"

    engine = Engine({"demo": index_dir}, FakeLLM(rules=[("Warsaw", "So the answer is: Warsaw.")], default="Warsaw"),
                    method="ircot")
    slow_llm = FakeLLM(default=slow)
    slow_engine = Engine({"demo": index_dir}, slow_llm, method="ircot")

    async def go():
        progress: list[tuple[float, str | None]] = []

        async def on_progress(value, total, message):
            progress.append((value, message))

        async with Client(create_mcp(engine)) as client:
            result = await client.call_tool("ask", {"question": QUESTION, "settings": {"max_steps": 3}},
                                            progress_callback=on_progress)
            assert not result.is_error, result.content
            steps = result.structured_content["evidence"]
            await asyncio.sleep(0.2)  # notifications sent from the worker may trail the result
            assert sorted(v for v, _ in progress) == list(range(1, len(steps) + 1))
            assert progress[0][1].startswith(f"{steps[0]['step']}: {QUESTION} -> Marie Curie")
        async with Client(create_mcp(slow_engine)) as client:
            with pytest.raises(mcp.MCPError):
                await client.call_tool("ask", {"question": QUESTION, "settings": {"max_steps": 30}}, read_timeout_seconds=1.0)
            at_timeout = len(slow_llm.calls)
            await asyncio.sleep(1.5)
            assert len(slow_llm.calls) <= at_timeout + 1  # stopped at its next step or LLM call, not 30 steps on

    run(go())
