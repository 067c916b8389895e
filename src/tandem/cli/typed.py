"""Command-line options generated from a settings model: one ``--field-name`` per field (a nested settings
model's fields flattened beside them), typed, with the field's description and default as help;
``--config FILE`` (YAML or JSON) under them and ``--json`` for the result. Unknown keys in the file and bad
values stop with exit 2 naming the key and the valid ones, as for every other settings model (the one
typed layer between the command line and the library). A field's ``json_schema_extra`` may say more:
``{"cli": [...]}`` gives its flags other names (kept from before the options were generated);
``{"cli": ["--on/--off"], "cli_values": [ON, OFF]}`` makes a two-valued field a switch whose sides set ``ON`` and
``OFF``; ``{"cli_argument": True}`` makes it a positional argument instead of an option."""

import inspect
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from pydantic.fields import FieldInfo

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


def _nested(info: FieldInfo) -> type[Settings] | None:
    kind = info.annotation
    return kind if isinstance(kind, type) and issubclass(kind, Settings) else None


def _fields(model: type[Settings], exclude: set[str]) -> list[tuple[str | None, str, FieldInfo]]:
    """(owner field or None, name, info) of every flag-able field; nested models flattened, dicts left to --config."""
    out: list[tuple[str | None, str, FieldInfo]] = []
    for name, info in model.model_fields.items():
        if name in exclude:
            continue
        inner = _nested(info)
        if inner is not None:
            out += [(name, n, i) for n, i in inner.model_fields.items()
                    if n not in exclude and typing.get_origin(i.annotation) is not dict]
        elif typing.get_origin(info.annotation) is not dict:
            out.append((None, name, info))
    return out


def _extra(info: FieldInfo) -> dict[str, Any]:
    return info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}


def _option(name: str, info: FieldInfo) -> Any:
    extra = _extra(info)
    kind = bool if extra.get("cli_values") else _cli_type(info.annotation)
    default = "required" if info.is_required() else f"default: {info.get_default(call_default_factory=True)}"
    text = f"{info.description or ''} ({default})"
    if extra.get("cli_argument"):
        return Annotated[Optional[kind], typer.Argument(help=text, metavar=name.upper(), show_default=False)]
    flags = list(extra.get("cli") or ["--" + name.replace("_", "-")])
    if kind is bool and "/" not in flags[0]:
        flags = [f"{flags[0]}/--no-{flags[0][2:]}"]
    return Annotated[Optional[kind], typer.Option(*flags, help=text)]


def options_command(model: type[Settings], run: Callable[..., None], *, name: str, doc: str,
                    extra: tuple[inspect.Parameter, ...] = (), exclude: tuple[str, ...] = (),
                    out_help: str = "Folder to write.") -> Callable[..., None]:
    """A typer command taking ``--out DIR`` (``out_help``), ``--config FILE``, ``--json``, ``extra`` parameters and
    one option per field of ``model``; it validates the layers (file, then the options given) into ``model`` and
    calls ``run(spec, out, as_json, **extras)``."""
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [
        inspect.Parameter("out", kw, annotation=Annotated[Path, typer.Option("--out", help=out_help)]),
        inspect.Parameter("config", kw, default=None, annotation=Annotated[Optional[Path], typer.Option(
            "--config", help="Settings as YAML or JSON; the options below go on top.")]),
        inspect.Parameter("as_json", kw, default=False, annotation=Annotated[bool, typer.Option(
            "--json", help="Print the result as JSON on stdout.")]),
        *extra,
    ]
    fields = _fields(model, set(exclude))
    params += [inspect.Parameter(field, kw, default=None, annotation=_option(field, info)) for _, field, info in fields]
    owners = {field: owner for owner, field, _ in fields}
    switches = {field: _extra(info)["cli_values"] for _, field, info in fields if _extra(info).get("cli_values")}
    extras = [p.name for p in extra]

    def command(**given: Any) -> None:
        out, config, as_json = given.pop("out"), given.pop("config"), given.pop("as_json")
        chosen_extra = {k: given.pop(k) for k in extras}
        data = read_config_file(config) if config else {}
        for field, value in given.items():
            if value is None or value == []:
                continue
            if field in switches:
                value = switches[field][0] if value else switches[field][1]
            owner = owners[field]
            if owner is None:
                data[field] = value
            else:
                data[owner] = {**(data.get(owner) or {}), field: value}
        spec = model.from_dict(data, where=f"{name} settings" + (f" ({config})" if config else ""))
        run(spec, out, as_json, **chosen_extra)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__doc__ = doc
    command.__name__ = name.replace(" ", "_")
    return command
