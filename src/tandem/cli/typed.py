"""Command-line options generated from a settings model: one ``--field-name`` per field, typed, with the
field's description and default as help; ``--config FILE`` (YAML or JSON) under them and ``--json`` for the
result. Unknown keys in the file and bad values stop with exit 2 naming the key and the valid ones, as for
every other settings model (the one typed layer between the command line and the library)."""

import inspect
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tandem.config import read_config_file
from tandem.settings import Settings


def _cli_type(annotation: Any) -> Any:
    """The type typer parses for a field: Literal -> str, ``X | None`` -> X, lists kept, others as they are."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return str
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _cli_type(inner[0]) if len(inner) == 1 else str
    if origin in (list, tuple):
        return list[_cli_type(typing.get_args(annotation)[0])]
    return annotation if annotation in (int, float, str, bool, Path) else str


def options_command(model: type[Settings], run: Callable[[Settings, Path, bool], None], *, name: str,
                    doc: str) -> Callable[..., None]:
    """A typer command taking ``--out DIR``, ``--config FILE``, ``--json`` and one option per field of ``model``;
    it validates the layers (file, then the options given) into ``model`` and calls ``run(spec, out, as_json)``."""
    params = [
        inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY,
                          annotation=Annotated[Path, typer.Option("--out", help="Folder to write.")]),
        inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
            Optional[Path], typer.Option("--config", help="Settings as YAML or JSON; the options below go on top.")]),
        inspect.Parameter("as_json", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=Annotated[
            bool, typer.Option("--json", help="Print the result as JSON on stdout.")]),
    ]
    for field, info in model.model_fields.items():
        flag = "--" + field.replace("_", "-")
        kind = _cli_type(info.annotation)
        default = "required" if info.is_required() else f"default: {info.get_default(call_default_factory=True)}"
        help_text = f"{info.description or ''} ({default})"
        option = typer.Option(f"{flag}/--no-{flag[2:]}" if kind is bool else flag, help=help_text)
        params.append(inspect.Parameter(field, inspect.Parameter.KEYWORD_ONLY, default=None,
                                        annotation=Annotated[Optional[kind], option]))

    def command(**given: Any) -> None:
        out, config, as_json = given.pop("out"), given.pop("config"), given.pop("as_json")
        layers = read_config_file(config) if config else {}
        chosen = {k: v for k, v in given.items() if v is not None and v != []}
        spec = model.from_dict({**layers, **chosen}, where=f"{name} settings" + (f" ({config})" if config else ""))
        run(spec, out, as_json)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__doc__ = doc
    command.__name__ = name.replace(" ", "_")
    return command
