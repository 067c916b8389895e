"""DualRAG's readers of its roles' replies. Every parser is lenient (it coerces what a small model gets almost
right: a string flag, a bare list, one keyword as a string); the caller falls back when one raises
:class:`tandem.errors.ParseError` or returns None; nothing here raises anything else on model output."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tandem.errors import ParseError
from tandem.llm.jsonparse import parse_json
from tandem.methods.dualrag.prompts import EMPTY, NONE_SUMMARIES, SCHEMAS

_TRUE = {"true", "yes", "1", "y"}
_FALSE = {"false", "no", "0", "n"}


def coerce_reasoner(value: Any) -> tuple[str, bool] | None:
    """``(thought, need_retrieve)`` from a parsed JSON value, tolerating strings for the flag; else None."""
    if isinstance(value, list) and value and isinstance(value[0], dict):
        value = value[0]
    if not isinstance(value, dict) or not isinstance(value.get("thought"), str) or not value["thought"].strip():
        return None
    flag = value.get("need_retrieve")
    if isinstance(flag, str) and flag.strip().lower() in _TRUE | _FALSE:
        flag = flag.strip().lower() in _TRUE
    if not isinstance(flag, bool):
        return None
    return value["thought"].strip(), flag


def parse_reasoner(text: str) -> tuple[str, bool]:
    """The Reasoner's reply -> ``(thought, need_retrieve)``; ParseError when it is not usable."""
    value = coerce_reasoner(parse_json(text, {"type": "object"}))
    if value is None:
        raise ParseError("no usable 'thought' and boolean 'need_retrieve'", raw=text)
    return value

def coerce_entities(value: Any) -> list[tuple[str, list[str]]] | None:
    """``[(entity, keywords)]`` from a parsed JSON value; keywords default to the entity's name.

    Accepts ``{"entities": [...]}`` or a bare list; a keyword given as one string becomes a list; a
    repeated entity merges its keywords. None when no usable entity is found.
    """
    items = value.get("entities") if isinstance(value, dict) else value
    if not isinstance(items, list):
        return None
    merged: dict[str, list[str]] = {}
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("entity"), str) or not item["entity"].strip():
            continue
        raw = item.get("keywords")
        keywords = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
        clean = [k.strip() for k in keywords if isinstance(k, str) and k.strip()]
        name = item["entity"].strip()
        bucket = merged.setdefault(name, [])
        bucket += [k for k in (clean or [name]) if k not in bucket]
    return list(merged.items()) or None


def parse_entities(text: str) -> list[tuple[str, list[str]]]:
    """The Entity Identifier's reply -> ``[(entity, keywords)]``; ParseError when no entity is usable."""
    value = coerce_entities(parse_json(text))
    if value is None:
        raise ParseError("no usable entity with keywords", raw=text)
    return value

def parse_summary(text: str) -> str:
    """The Summarizer's reply -> its notes (``None`` notes included); ParseError when unreadable."""
    value = parse_json(text, {"type": "object"})
    notes = value.get("notes") if isinstance(value, dict) else None
    if not isinstance(notes, str):
        raise ParseError("no string 'notes'", raw=text)
    return notes.strip()


# Grounded notes: a sentence of notes that names something its documents and the question never name is a
# small model's guess (the name of a worked example, an actor for a director); ``grounded_notes`` drops it.
_NAME = re.compile(r"[A-Z][\w'’.-]*(?:\s+(?:(?:of|the|de|la|von|van|and|&)\s+)?[A-Z][\w'’.-]*)*")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_POSSESSIVE = re.compile(r"['’]s?$")
_NOT_NAMES = frozenset("a an and as at after also before both but by during for from he her his in it its known "
                       "none on she that the their there these they this those when while with".split())


def _plain(text: str) -> str:
    return " " + re.sub(r"\W+", " ", text.casefold()).strip() + " "


def names_in(sentence: str) -> list[str]:
    """The capitalised word runs of ``sentence`` ("Andrei Tarkovsky", "University of Virginia"), possessives
    and a leading function word ("The", "In") trimmed."""
    out = []
    for match in _NAME.finditer(sentence):
        words = [_POSSESSIVE.sub("", w).rstrip(".") for w in match.group().split()]
        while words and words[0].casefold() in _NOT_NAMES:
            words.pop(0)
        if words:
            out.append(" ".join(words))
    return out


def ground_notes(notes: str, sources: Sequence[str]) -> tuple[str, list[str]]:
    """``(kept, dropped)``: the notes less every sentence naming a name that no source (the documents read,
    the question) holds, compared case- and punctuation-blind, word by word; ``kept`` is ``None`` when no
    sentence is left."""
    plain = _plain(" ".join(sources))
    kept, dropped = [], []
    for sentence in _SENTENCE.split(notes.strip()):
        missing = [n for n in names_in(sentence) if _plain(n) not in plain]
        (dropped if missing else kept).append(sentence)
    return (" ".join(kept) if kept else EMPTY), dropped


_WRAPPERS = " \t\r\n\"'`*_"


def is_none_summary(text: str) -> bool:
    """The EXACT discard rule: the output, trimmed of whitespace/quotes/emphasis and lower-cased, is
    empty, ``none`` or ``none.``. (The authors' substring test also dropped "Nonetheless, ...".)"""
    return text.strip(_WRAPPERS).lower() in NONE_SUMMARIES

# Strict check used by the SFT export: does this output parse for its role?

PARSERS = {"reasoner": parse_reasoner, "entity_identifier": parse_entities, "summarizer": parse_summary}


def parses_for(role: str, output: str) -> bool:
    """True when ``output`` is a well-formed reply for ``role`` (JSON roles: schema-valid and usable)."""
    if role not in SCHEMAS:
        return bool(output.strip())
    try:
        parse_json(output, SCHEMAS[role])
        PARSERS[role](output)
    except ParseError:
        return False
    return True
