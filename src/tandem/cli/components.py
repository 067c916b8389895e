"""``tandem methods|retrievers|rerankers|stores|llms|index-kinds [NAME] [--json]``: what the registry holds
(:mod:`tandem.registry`), each command generated from one registry - the names, or one component's settings
with their types, defaults and meanings."""


import json
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from tandem.cli.common import JSON_OPTION, out, print_json
from tandem.registry import ALL, Registry

# the word a component's settings are set with on the command line
FLAG = {"methods": "--set", "retrievers": "--retriever-opt", "stores": "--store-opt", "llms": "--llm-opt",
        "rerankers": "--set", "index-kinds": "--kind"}


def show(registry: Registry[Any], name: str | None, as_json: bool, flag: str, word: str | None = None) -> None:
    """The registered names (one a line, or a JSON list), or component ``name``'s settings as a table or JSON;
    ``word`` is the listing command (``tandem WORD NAME``; by default the registry's word in
    :data:`tandem.registry.ALL`, which :func:`register` makes a command)."""
    if name is None:
        if as_json:
            print_json(registry.names())
            return
        word = word or command_word(registry)
        table = Table(title=f"{registry.plural} (tandem {word} NAME: its settings)")
        for col in ("name", "needs", "what"):
            table.add_column(col, overflow="fold")
        for entry in registry.entries():
            table.add_row(entry.name, ", ".join(entry.needs), escape(entry.doc))
        out.print(table)
        return
    entry = registry.get(name)
    settings = entry.describe()
    if as_json:
        print_json({registry.kind.replace(" ", "_").lower(): name, "doc": entry.doc, "needs": list(entry.needs),
                    "settings": settings})
        return
    table = Table(title=f"{name}: {entry.doc} ({flag} KEY=VALUE)" if settings else f"{name}: {entry.doc} (no settings)")
    for col in ("setting", "type", "default", "meaning"):
        table.add_column(col, overflow="fold")
    for key, info in settings.items():
        table.add_row(key, escape(str(info["type"])), escape(json.dumps(info["default"])), escape(info["doc"]))
    out.print(table)


def command_word(registry: Registry[Any]) -> str:
    """The listing command of ``registry`` (``llms`` for the LLM backends): its key in :data:`tandem.registry.ALL`."""
    for word, known in ALL.items():
        if known is registry:
            return word
    return registry.plural.replace(" ", "-")


def _command(word: str, registry: Registry[Any]) -> Any:
    def command(
        name: Annotated[Optional[str], typer.Argument(help=f"One of the {registry.plural}: list its settings.")] = None,
        as_json: Annotated[bool, JSON_OPTION] = False,
    ) -> None:
        show(registry, name, as_json, FLAG[word], word)
        if word == "llms" and name in (None, "local") and not as_json:
            from tandem.cli.llm import show_ladder

            show_ladder()

    command.__doc__ = (f"List the registered {registry.plural}, or one's settings ({FLAG[word]} KEY=VALUE) with "
                       "their types, defaults and meanings.")
    return command


def register(app: typer.Typer) -> None:
    """One listing command per registry (``tandem methods``, ``tandem retrievers``, ...)."""
    for word, registry in ALL.items():
        if word != "trainers":
            app.command(word)(_command(word, registry))
