"""The base of every settings model: typed, frozen, unknown keys refused with the valid ones listed, each field
documented (``Settings.describe``). Methods, retrievers, rerankers, stores, LLM backends, trainers and whole runs
(:mod:`tandem.config`) all declare their settings as subclasses."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic.fields import FieldInfo

from tandem.errors import ConfigError


class Settings(BaseModel):
    """A block of settings: frozen, unknown keys refused, ``from_dict`` / ``to_dict`` round-trip."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, arbitrary_types_allowed=True)
    #: old setting name -> its name now: accepted for one release with a deprecation message
    renamed: ClassVar[dict[str, str]] = {}
    #: (a, b) pairs of settings where a may not exceed b (k within candidates, ...), checked after the fields
    at_most: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: preset name -> ``{"settings": {...}, "run": {...}}``: what ``--preset NAME`` sets for this component (its
    #: settings, and run options that differ from the preset's own; :mod:`tandem.methods.presets`)
    presets: ClassVar[dict[str, dict[str, dict[str, Any]]]] = {}

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        for small, large in self.at_most:
            if getattr(self, small) > getattr(self, large):
                raise ValueError(f"{small} ({getattr(self, small)}) must not exceed {large} ({getattr(self, large)})")
        return self

    @model_validator(mode="before")
    @classmethod
    def _rename(cls, data: Any) -> Any:
        if not cls.renamed or not isinstance(data, Mapping) or not set(data) & set(cls.renamed):
            return data
        data = dict(data)
        for old, new in cls.renamed.items():
            if old in data:
                if new in data:
                    raise ValueError(f"{old!r} is the old name of {new!r}: give only {new!r}")
                logging.getLogger("tandem").warning("setting %r is now called %r; the old name goes in the next "
                                                    "release", old, new)
                data[new] = data.pop(old)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None = None, where: str = "") -> Self:
        """Validate ``data``; a problem is a ConfigError that names each bad key (and, for an unknown
        key, every valid one)."""
        try:
            return cls.model_validate(dict(data or {}))
        except ValidationError as exc:
            raise ConfigError(describe_errors(cls, exc, where)) from None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values, defaults included: feeding it back to ``from_dict`` gives the same settings."""
        return self.model_dump(mode="json")

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` validated like any other input."""
        return type(self).from_dict({**self.to_dict(), **changes})

    @classmethod
    def describe(cls) -> dict[str, dict[str, Any]]:
        """Each setting's ``type``, ``default`` (JSON) and ``doc``, in declaration order."""
        defaults = cls().to_dict() if _all_defaulted(cls) else {}
        own = [n for n in cls.__annotations__ if n in cls.model_fields]  # the class's own settings first
        order = [*own, *(n for n in cls.model_fields if n not in own)]
        return {name: {"type": _type_name(cls.model_fields[name].annotation), "default": defaults.get(name),
                       "doc": cls.model_fields[name].description or ""} for name in order}


def _all_defaulted(cls: type[BaseModel]) -> bool:
    return all(not f.is_required() for f in cls.model_fields.values())


def _type_name(annotation: Any) -> str:
    """``int``, ``str | None``, a Literal's choices as ``a | b``, ``dict[str, int]``."""
    import types
    import typing

    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and origin is None:
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("collections.abc.", "")


def describe_errors(cls: type[BaseModel], exc: ValidationError, where: str = "") -> str:
    """One line per validation problem: ``where.key: message``; unknown keys list the valid ones."""
    prefix = f"{where}: " if where else ""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(value)"
        if err["type"] == "extra_forbidden":
            lines.append(f"unknown setting {loc!r}; valid settings: {sorted(cls.model_fields)}")
        else:
            lines.append(f"setting {loc!r}: {err['msg']} (got {err.get('input')!r})")
    return prefix + "; ".join(lines)


#: ``Field(..., json_schema_extra=SERVER_ONLY)``: a setting a request to the HTTP API may not set (it loads a
#: model, an LLM or a file, or picks a component); it is set when the server starts.
SERVER_ONLY: dict[str, Any] = {"per_request": False}


def per_request(info: FieldInfo) -> bool:
    """Whether a request to the HTTP API may set the field (not marked :data:`SERVER_ONLY`)."""
    extra = info.json_schema_extra
    return not (isinstance(extra, dict) and extra.get("per_request") is False)


__all__ = ["SERVER_ONLY", "Settings", "describe_errors", "per_request"]
