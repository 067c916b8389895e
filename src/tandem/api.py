"""The small public Python API: index documents (plain texts welcome), open an index, ask a question.

    import tandem
    index = tandem.index_documents(["Marie Curie was born in Warsaw.", "Warsaw is the capital of Poland."], "my-index")
    answer = tandem.ask("In which country was Marie Curie born?", index)  # the default method
    print(answer.text, answer.trace.docs_read)

Everything here goes through the same composition layer as the CLI and the server
(:func:`tandem.compose.build_run`)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tandem.config import RetrieverConfig
from tandem.errors import DataError
from tandem.index.build import build_index
from tandem.index.index import Index, open_index
from tandem.llm.base import LLM
from tandem.methods.base import Method
from tandem.types import Answer, Document, Question


def as_documents(items: Iterable[str | Document | Mapping[str, Any]]) -> list[Document]:
    """Documents from plain texts (id = a hash of the text, stable across runs), mappings with ``text``
    (and optionally ``id``, ``title``) or Documents; duplicate ids get a ``#n`` suffix."""
    docs: list[Document] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        if isinstance(item, Document):
            doc = item
        elif isinstance(item, str):
            doc = Document(hashlib.sha1(item.encode("utf-8")).hexdigest()[:12], "", item)
        elif isinstance(item, Mapping) and isinstance(item.get("text"), str):
            text = item["text"]
            doc = Document(str(item.get("id") or hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]),
                           str(item.get("title") or ""), text)
        else:
            raise DataError(f"document {i}: expected a string, a Document or a mapping with 'text', got "
                            f"{type(item).__name__}")
        n = seen.get(doc.id, 0)
        seen[doc.id] = n + 1
        docs.append(doc if n == 0 else Document(f"{doc.id}#{n}", doc.title, doc.text, doc.metadata))
    if not docs:
        raise DataError("no documents to index")
    return docs


def index_documents(items: Iterable[str | Document | Mapping[str, Any]], folder: str | Path, *,
                    kind: str = "hybrid", encoder: str = "minilm") -> Index:
    """Index ``items`` into ``folder`` (bm25 | dense | hybrid; built atomically) and open it."""
    build_index(as_documents(items), folder, kind=kind, encoder=encoder)
    return open_index(folder)


def load_method(method: str | None = None, index: Index | str | Path | None = None, llm: str | LLM = "local", *,
                retriever: str | None = None, **settings: Any) -> Method:
    """A method ready to answer many questions (``method`` by default the registry's default, ``tandem
    methods``): ``settings`` as in ``tandem methods NAME``."""
    from tandem.compose import build_run

    return build_run(method, llm, index, settings, retriever=RetrieverConfig(kind=retriever)).method


def ask(question: str, index: Index | str | Path | None = None, *, method: str | None = None, llm: str | LLM = "local",
        retriever: str | None = None, **settings: Any) -> Answer:
    """Answer one question; the Answer's ``trace`` holds every query, hit and LLM call."""
    return load_method(method, index, llm, retriever=retriever, **settings).answer(Question("ask", question))


__all__ = ["as_documents", "ask", "index_documents", "load_method", "open_index"]
