"""``tandem serve``: the HTTP API and web page over one or more indexes; registered by the CLI package."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from tandem.cli.common import WARM_UP_HELP, console
from tandem.errors import ConfigError


def _indexes(items: list[str]) -> dict[str, Path]:
    """``--index DIR`` or ``--index NAME=DIR`` -> name -> folder (a bare DIR is named after its folder)."""
    out: dict[str, Path] = {}
    for item in items:
        name, sep, path = item.partition("=")
        folder = Path(path if sep else item)
        key = name if sep else folder.name
        if key in out:
            raise ConfigError(f"two indexes named {key!r}: use --index NAME=DIR")
        out[key] = folder
    return out


def serve(
    index: Annotated[list[str], typer.Option("--index", help="Index folder, or NAME=DIR; repeatable.")] = [],  # noqa: B006
    method: Annotated[Optional[str], typer.Option(help="Default method (default: the registry's, tandem methods).")] = None,
    llm: Annotated[str, typer.Option(help="LLM spec: local | hf:PATH | openai:MODEL@URL")] = "local",
    llm_opt: Annotated[list[str], typer.Option("--llm-opt", help="LLM backend option KEY=VALUE, repeatable.")] = [],  # noqa: B006
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    api_key_file: Annotated[Optional[Path], typer.Option(help="File holding the API key (else $TANDEM_API_KEY; none: open).")] = None,
    cors: Annotated[list[str], typer.Option(help="Allowed CORS origin, repeatable (default: CORS off).")] = [],  # noqa: B006
    workers: Annotated[int, typer.Option(help="Questions answered at once.")] = 2,
    max_queue: Annotated[int, typer.Option(help="Questions admitted (running + waiting); more get HTTP 429.")] = 64,
    max_body: Annotated[int, typer.Option(help="Largest request body in bytes (413 above).")] = 1 << 20,
    max_question: Annotated[int, typer.Option(help="Longest question in characters (422 above).")] = 2000,
    uploads: Annotated[Optional[Path], typer.Option(help="Folder for indexes built from uploaded files (POST /v1/indexes); default: none.")] = None,
    max_upload: Annotated[int, typer.Option(help="Largest upload in bytes (413 above).")] = 20 << 20,
    grace: Annotated[float, typer.Option(help="On SIGTERM / Ctrl-C: seconds in-flight requests get to finish before they are cancelled.")] = 30.0,
    warm_up: Annotated[bool, typer.Option(help=WARM_UP_HELP)] = True,
) -> None:
    """Serve the HTTP API (OpenAPI at /docs), an OpenAI-compatible /v1/chat/completions and the web page at /."""
    from tandem.llm.options import parse_pairs, split_llm_options
    from tandem.server.app import create_app
    from tandem.server.engine import Engine
    from tandem.server.lifecycle import serve_until_stopped

    if not index and uploads is None:
        raise ConfigError("give at least one --index DIR (build one with `tandem index`) or --uploads DIR")
    key = api_key_file.read_text(encoding="utf-8-sig").strip() if api_key_file else os.environ.get("TANDEM_API_KEY") or None
    if host not in ("127.0.0.1", "localhost", "::1") and key is None:
        console.print(f"[yellow]warning: serving on {host} without an API key: anyone who reaches it can use it")
    backend_opts, _ = split_llm_options(llm, parse_pairs(llm_opt))
    engine = Engine(_indexes(index), llm, method=method, llm_opts=backend_opts, workers=workers, max_queue=max_queue,
                    uploads=uploads)
    app = create_app(engine, api_key=key, max_body=max_body, max_question=max_question, max_upload=max_upload,
                     cors=cors or None)
    console.print(f"tandem serving {sorted(engine.indexes)} with {engine.default_method} on http://{host}:{port}/ "
                  f"(API docs: /docs{'; API key required' if key else ''})")
    if warm_up:
        engine.start_warm_up(app.state.default_method)  # the method the server answers with by default
    serve_until_stopped(app, host=host, port=port, grace=grace, on_stop=engine.close)
    console.print("tandem serve stopped")


def register(app: typer.Typer) -> None:
    """Add ``tandem serve`` to the CLI."""
    app.command("serve")(serve)
