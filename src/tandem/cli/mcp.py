"""``tandem mcp``: the Model Context Protocol server over one or more indexes (stdio or streamable
HTTP); registered by the CLI package."""

from __future__ import annotations

import contextlib
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from tandem.cli.common import LLM_OPT_HELP, WARM_UP_HELP, console
from tandem.cli.serve import _indexes
from tandem.errors import ConfigError
from tandem.secrets import register_secret

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class Transport(str, Enum):
    """How the MCP server talks: stdio (a client's child process) or streamable HTTP."""
    stdio = "stdio"
    http = "http"


def mcp(
    index: Annotated[list[str], typer.Option("--index", help="Index folder, or NAME=DIR; repeatable.")] = [],  # noqa: B006
    method: Annotated[Optional[str], typer.Option(help="Default method of the ask tool (default: the registry's, tandem methods).")] = None,
    llm: Annotated[str, typer.Option(help="LLM spec: local | hf:PATH | openai:MODEL@URL | fake:TEXT")] = "local",
    llm_opt: Annotated[list[str], typer.Option("--llm-opt", help=LLM_OPT_HELP)] = [],  # noqa: B006
    transport: Annotated[Transport, typer.Option(help="stdio (a client starts this command) or http "
                                                      "(streamable HTTP at http://HOST:PORT/mcp).")] = Transport.stdio,
    host: Annotated[str, typer.Option(help="Address to bind with --transport http (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port with --transport http.")] = 8001,
    workers: Annotated[int, typer.Option(help="Questions answered at once.")] = 2,
    max_queue: Annotated[int, typer.Option(help="Calls admitted (running + waiting); more get a tool error.")] = 64,
    max_question: Annotated[int, typer.Option(help="Longest question or query in characters.")] = 2000,
    api_key_file: Annotated[Optional[Path], typer.Option(
        help="With --transport http: file holding the API key (else $TANDEM_API_KEY; none: open).")] = None,
    warm_up: Annotated[bool, typer.Option(help=WARM_UP_HELP)] = True,
) -> None:
    """Serve tandem's search and methods to MCP clients (agents, IDEs): tools search, ask, list_indexes,
    list_methods; passages as resources passage://INDEX/ID."""
    from tandem.llm.options import parse_pairs, split_llm_options
    from tandem.server.engine import Engine
    from tandem.server.mcp import create_mcp

    if not index:
        raise ConfigError("give at least one --index DIR (build one with `tandem index`)")
    key = api_key_file.read_text(encoding="utf-8-sig").strip() if api_key_file else os.environ.get("TANDEM_API_KEY") or None
    register_secret(key)
    if transport is Transport.http and host not in LOOPBACK and key is None:
        console.print(f"[yellow]warning: serving MCP on {host} without an API key: anyone who reaches it can use it")
    backend_opts, _ = split_llm_options(llm, parse_pairs(llm_opt))
    with contextlib.redirect_stdout(sys.stderr):  # over stdio, stdout carries the protocol only
        engine = Engine(_indexes(index), llm, method=method, llm_opts=backend_opts, workers=workers, max_queue=max_queue)
    server = create_mcp(engine, max_question=max_question)
    if warm_up:
        engine.start_warm_up()
    try:
        if transport is Transport.stdio:
            server.run("stdio")
        else:
            import uvicorn

            from tandem.server.mcp import http_app

            console.print(f"tandem MCP server: {sorted(engine.indexes)} with {engine.default_method} on http://{host}:{port}/mcp"
                          + ("; API key required" if key else ""))
            uvicorn.run(http_app(server, host=host, api_key=key), host=host, port=port, log_level="warning")
    finally:
        engine.close()


def register(app: typer.Typer) -> None:
    """Add ``tandem mcp`` to the CLI."""
    app.command("mcp")(mcp)
