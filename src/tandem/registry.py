"""The one registry: every pluggable component - method, retriever, reranker, index kind, vector store, LLM
backend, trainer - is an :class:`Entry` declared next to its code with :meth:`Registry.register`.

An entry holds the component's name, its settings model (a :class:`tandem.config.Settings`: types,
defaults, bounds, docs), its builder and what it needs. Everything that lists or validates components -
the CLI's options and ``tandem methods|retrievers|stores NAME``, the HTTP API's schemas, ``/v1/models``,
the docs' settings tables, Python's ``load_method`` - reads these entries, so a new method is one
algorithm file (its settings model and one ``@METHODS.register(...)`` line) and one prompts file.

Entries are declared in the modules named by each registry (imported on first use, so importing this
module is cheap and makes no import circle); modules named in ``$TANDEM_PLUGINS`` (comma-separated) are
imported too, so components outside the package register the same way.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from tandem.errors import ConfigError
from tandem.settings import Settings

if TYPE_CHECKING:  # the builders' types; importing them here at run time would make import circles
    from tandem.index.index import Index
    from tandem.index.store import DocStore
    from tandem.llm.base import LLM
    from tandem.methods.base import Method
    from tandem.methods.parts import Parts
    from tandem.rerank.base import Reranker
    from tandem.retrieve.base import Retriever
    from tandem.types import OnProgress

T = TypeVar("T", bound=Callable[..., Any])
PLUGINS_ENV = "TANDEM_PLUGINS"


class MethodBuilder(Protocol):
    """A method's builder: the parts built for the run and the method's validated settings."""

    def __call__(self, parts: Parts, settings: Any, /) -> Method: ...


class RetrieverBuilder(Protocol):
    """A retriever's builder: the index it searches and its validated settings."""

    def __call__(self, index: Index, settings: Any, /) -> Retriever: ...


class RerankerBuilder(Protocol):
    """A reranker's builder: the method's rerank settings, the store it reads and the index (if any)."""

    def __call__(self, settings: Any, store: DocStore, index: Index | None = None, /) -> Reranker | None: ...


class StoreBuilder(Protocol):
    """A vector store's builder: its validated settings and where it lives -> the index manifest's store options."""

    def __call__(self, settings: Any, location: str = "", /) -> dict[str, Any]: ...


class IndexKindBuilder(Protocol):
    """An index kind's builder: the components (``bm25``, ``dense``) the kind builds."""

    def __call__(self) -> tuple[str, ...]: ...


class LLMBuilder(Protocol):
    """An LLM backend's builder: the spec's argument (after ``:``), the whole spec and the options."""

    def __call__(self, arg: str, spec: str, options: dict[str, Any], /) -> LLM: ...


class TrainerBuilder(Protocol):
    """A trainer's builder: its validated settings, the output folder and a progress callback -> a report."""

    def __call__(self, settings: Any, out_dir: Path, on_progress: OnProgress | None = None, /) -> dict[str, Any]: ...


class NoSettings(Settings):
    """A component without settings: any key given is refused."""


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered component.

    Attributes:
        name: what users type (``--method NAME``, ``--retriever graph``).
        kind: the registry's kind (``method``, ``retriever``, ...).
        settings: the settings model; ``validate`` checks user input against it.
        build: the builder; its arguments are the registry's convention (documented on each registry).
        needs: what it needs to be built (``index``: a method that retrieves; ``dense``: a retriever over
            an index's dense part; ...).
        doc: one line for listings (the settings model's docstring's first line by default).
        options: registry-specific facts (a method's ``roles``, per-request ``refused`` settings, ...).
    """

    name: str
    kind: str
    settings: type[Settings]
    build: T
    needs: tuple[str, ...] = ()
    doc: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)

    def validate(self, data: Settings | Mapping[str, Any] | None = None, where: str | None = None) -> Settings:
        """``data`` validated against the settings model (a ConfigError names each bad key and the valid ones)."""
        if isinstance(data, self.settings):
            return data
        given = data.to_dict() if isinstance(data, Settings) else dict(data or {})
        return self.settings.from_dict(given, where=where or f"{self.name} settings")

    def describe(self) -> dict[str, dict[str, Any]]:
        """Each setting's ``type``, ``default`` and ``doc`` (the settings model's :meth:`Settings.describe`)."""
        return self.settings.describe()

    def defaults(self) -> dict[str, Any]:
        """The settings with their defaults."""
        return {k: v["default"] for k, v in self.describe().items()}

    def json_schema(self) -> dict[str, Any]:
        """The settings model's JSON schema (types, bounds, defaults, descriptions)."""
        return self.settings.model_json_schema()

    def markdown(self) -> str:
        """The settings as a Markdown table (setting, type, default, meaning): what the docs' settings tables hold,
        written by ``python scripts/docs_settings.py`` and checked by a test."""
        import json

        rows = ["| setting | type | default | meaning |", "|---|---|---|---|"]
        for name, info in self.describe().items():
            cells = [f"`{name}`", info["type"].replace("|", "\\|"), f"`{json.dumps(info['default'])}`",
                     info["doc"].replace("|", "\\|")]
            rows.append("| " + " | ".join(cells) + " |")
        return "\n".join(rows) if len(rows) > 2 else "(no settings)"

    def summary(self) -> dict[str, Any]:
        """A JSON-ready description: name, doc, needs and settings."""
        return {"name": self.name, "kind": self.kind, "doc": self.doc, "needs": list(self.needs),
                "settings": self.describe()}


def subpackages(package: str) -> tuple[str, ...]:
    """The sub-packages of ``package`` (a folder with an ``__init__.py`` each), sorted: one component each."""
    found = importlib.import_module(package)
    return tuple(sorted(f"{package}.{m.name}" for m in pkgutil.iter_modules(found.__path__) if m.ispkg))


class Registry(Generic[T]):
    """Components of one kind by name. ``modules`` are imported on first lookup; they register their entries.
    ``discover``: a package whose every sub-package is such a module (one folder a component), found then."""

    def __init__(self, kind: str, modules: tuple[str, ...] = (), *, discover: str | None = None,
                 plural: str | None = None) -> None:
        self.kind = kind
        self.plural = plural or f"{kind}s"
        self._modules = modules
        self._discover = discover
        self._entries: dict[str, Entry[T]] = {}
        self._loaded = False
        self._lock = threading.RLock()

    def register(self, name: str, *, settings: type[Settings] = NoSettings, needs: tuple[str, ...] = (),
                 doc: str | None = None, **options: Any) -> Callable[[T], T]:
        """Decorator: register the builder it wraps as ``name`` (a name registered twice is a ConfigError,
        unless it is the same builder again, as on a module reload)."""

        def add(build: T) -> T:
            check_builder(self.kind, name, build)
            line = doc if doc is not None else (settings.__doc__ or build.__doc__ or "").strip().split("\n")[0]
            entry = Entry(name, self.kind, settings, build, tuple(needs), line, dict(options))
            with self._lock:
                old = self._entries.get(name)
                if old is not None and old.build.__qualname__ != build.__qualname__:
                    raise ConfigError(f"{self.kind} {name!r} is registered twice ({old.build.__module__} and "
                                      f"{build.__module__})")
                self._entries[name] = entry
            return build

        return add

    def remove(self, name: str) -> None:
        """Drop entry ``name`` (a plugin unloading; tests that register a component for their own use)."""
        with self._lock:
            self._entries.pop(name, None)

    def _load(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            own = (*self._modules, *(subpackages(self._discover) if self._discover else ()))
            for module in (*own, *plugin_modules()):
                try:
                    importlib.import_module(module)
                except ImportError as exc:
                    if module in own:
                        raise
                    raise ConfigError(f"${PLUGINS_ENV} names {module!r}, which cannot be imported: {exc}") from None
            self._loaded = True

    def names(self) -> list[str]:
        """Registered names, sorted."""
        self._load()
        return sorted(self._entries)

    def get(self, name: str) -> Entry[T]:
        """The entry ``name``; an unknown name is a ConfigError listing the registered ones."""
        self._load()
        if name not in self._entries:
            raise ConfigError(f"unknown {self.kind} {name!r}; choose one of {sorted(self._entries)}")
        return self._entries[name]

    def default(self) -> str:
        """The name of the entry registered with ``default=True`` (the one used where none is named); a
        ConfigError where none or several are."""
        self._load()
        marked = sorted(n for n, e in self._entries.items() if e.options.get("default"))
        if len(marked) != 1:
            raise ConfigError(f"{len(marked)} {self.plural} are registered as the default ({marked}); one must be")
        return marked[0]

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def entries(self) -> list[Entry[T]]:
        """Every entry, by name."""
        return [self._entries[n] for n in self.names()]

    def with_need(self, need: str) -> list[str]:
        """Names of the entries that need ``need``."""
        return [e.name for e in self.entries() if need in e.needs]


def check_builder(kind: str, name: str, build: Callable[..., Any]) -> None:
    """Refuse (ConfigError) a builder that cannot be called the way its registry calls every builder of its kind
    (:data:`BUILDER_TYPES`: the positional arguments of the kind's protocol); the static type checker holds the
    package's own builders to the same protocols."""
    protocol = BUILDER_TYPES.get(kind)
    if protocol is None:
        return
    wanted = [p for p in inspect.signature(protocol.__call__).parameters.values() if p.name != "self"]
    most, least = len(wanted), sum(p.default is inspect.Parameter.empty for p in wanted)
    params = list(inspect.signature(build).parameters.values())
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return
    positional = [p for p in params if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                  inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    required = [p for p in params if p.default is inspect.Parameter.empty
                and p.kind is not inspect.Parameter.VAR_KEYWORD]
    if len(required) > least or len(positional) < most:
        shape = ", ".join(p.name for p in wanted)
        raise ConfigError(f"{kind} {name!r}: its builder {getattr(build, '__qualname__', build)!r} takes "
                          f"({', '.join(p.name for p in params)}); a {kind} builder is called with ({shape})")


def plugin_modules() -> tuple[str, ...]:
    """Modules named in ``$TANDEM_PLUGINS`` (comma-separated)."""
    return tuple(m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip())


#: QA methods, one folder each under ``tandem/methods/`` (found, not listed); builder ``(parts:
#: tandem.methods.parts.Parts, settings) -> Method``; needs ``index`` when it retrieves.
METHODS: Registry[MethodBuilder] = Registry("method", discover="tandem.methods")
#: Retrievers over an index; builder ``(index, settings) -> Retriever``; needs: index components.
RETRIEVERS: Registry[RetrieverBuilder] = Registry("retriever", ("tandem.retrieve",))
#: Rerankers; builder ``(settings, store, index) -> Reranker | None``.
RERANKERS: Registry[RerankerBuilder] = Registry("reranker", ("tandem.rerank",))
#: Vector stores of a dense index; builder ``(settings) -> store options``.
STORES: Registry[StoreBuilder] = Registry("store", ("tandem.index.vectors",))
#: Index kinds (``tandem index --kind``); builder ``() -> the components it builds``.
INDEX_KINDS: Registry[IndexKindBuilder] = Registry("index kind", ("tandem.index.build",), plural="index kinds")
#: LLM backends (the part of ``--llm`` before ``:``); builder ``(arg, spec, options) -> LLM``.
LLMS: Registry[LLMBuilder] = Registry("LLM backend", ("tandem.llm.backends",), plural="LLM backends")
#: Trainers (``tandem train NAME``, ``tandem federate``); builder ``(settings, on_progress) -> result``. A method's
#: own trainer is declared in its folder (found with the methods), shared ones in ``tandem.train.specs``.
TRAINERS: Registry[TrainerBuilder] = Registry("trainer", ("tandem.train.specs",), discover="tandem.methods")

#: every registry by the word the CLI lists it under (``tandem components KIND``)
ALL: dict[str, Registry[Any]] = {"methods": METHODS, "retrievers": RETRIEVERS, "rerankers": RERANKERS,
                                 "stores": STORES, "index-kinds": INDEX_KINDS, "llms": LLMS, "trainers": TRAINERS}

#: each registry's builder type (what :func:`check_builder` holds a registered builder to)
BUILDER_TYPES: dict[str, type] = {"method": MethodBuilder, "retriever": RetrieverBuilder, "reranker": RerankerBuilder,
                                  "store": StoreBuilder, "index kind": IndexKindBuilder, "LLM backend": LLMBuilder,
                                  "trainer": TrainerBuilder}

__all__ = ["ALL", "BUILDER_TYPES", "INDEX_KINDS", "LLMS", "METHODS", "RERANKERS", "RETRIEVERS", "STORES", "TRAINERS",
           "Entry", "IndexKindBuilder", "LLMBuilder", "MethodBuilder", "NoSettings", "Registry", "RerankerBuilder",
           "RetrieverBuilder", "StoreBuilder", "TrainerBuilder", "plugin_modules", "subpackages"]
