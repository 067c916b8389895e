"""A passage graph from mentions, stored beside an index as the ``graph`` extra.

Most multi-hop questions are bridges: the second passage is about an entity the first one names.
The graph makes that link explicit, without an LLM:

1. **Mention edges.** Every passage title yields aliases (:func:`title_aliases`): the title itself,
   the title without a disambiguation suffix ("Kiss and Tell (1945 film)" -> "Kiss and Tell"),
   the part before a comma ("Summerlin, Nevada" -> "Summerlin"), without a leading article,
   accent-free and with HTML entities decoded. All aliases go into one Aho-Corasick automaton
   (``pyahocorasick``); one pass over each passage's normalised text finds every alias it contains,
   at word boundaries. Passage i -> passage j when i's text contains an alias of j's title.
   Aliases found in more than ``max_df`` of the passages ("Music", "2010") carry no bridge and
   are dropped.
2. **Entity edges** (optional, ``entities=True``). A lightweight offline extractor
   (:func:`extract_entities`: runs of capitalised words, two or more tokens, connectors such as "of"
   allowed inside) names the entities of each passage; two passages sharing an entity that occurs in
   at most ``entity_max_df`` passages are linked both ways, weight = sum over shared entities of
   1 / (df - 1).

Storage: the edges as parallel arrays ``graph_src``, ``graph_dst`` (int32 rows), ``graph_weight``
(float32) and ``graph_type`` (uint8: 0 mention, 1 entity) under ``extras/``; the build settings and
edge counts in ``manifest.params["graph"]``. :func:`load_graph` turns them into scipy CSR matrices.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import sparse

from tandem.errors import ConfigError
from tandem.index.store import DocStore
from tandem.types import OnProgress

EXTRA_PREFIX = "graph"
EDGE_TYPES = {"mention": 0, "entity": 1}
DEFAULT_GRAPH: dict[str, Any] = {
    "min_alias_chars": 4,  # shorter aliases ("UK", "Ra") match too much by chance
    "max_df": 0.01,  # drop aliases occurring in more than this share of passages
    "entities": True,
    "entity_max_df": 20,  # entities shared by more passages than this link nothing
}

_SUFFIX = re.compile(r"\s*\([^()]*\)\s*$")  # "(film)", "(1945 film)", "(band)"
_ARTICLE = re.compile(r"^(the|a|an)\s+", re.IGNORECASE)
_NON_WORD = re.compile(r"[^0-9a-z]+")
_STOP_ALIASES = frozenset({
    "the", "and", "for", "with", "from", "that", "this", "which", "where", "when", "what", "who", "whom", "whose",
    "other", "there", "their", "they", "them", "these", "those", "into", "onto", "about", "after", "before",
    "between", "during", "under", "over", "also",
})


def normalise(text: str) -> str:
    """Lower-case, accents stripped, every run of non-alphanumerics one space, padded with spaces,
    so an alias ``" kiss and tell "`` matches only at word boundaries."""
    folded = unicodedata.normalize("NFKD", html.unescape(text)).encode("ascii", "ignore").decode("ascii").lower()
    return f" {_NON_WORD.sub(' ', folded).strip()} "


def title_aliases(title: str, min_chars: int = DEFAULT_GRAPH["min_alias_chars"]) -> set[str]:
    """Normalised surface forms of a title: itself, without a trailing "(...)" suffix, before a comma
    ("Summerlin, Nevada" -> "Summerlin"), without a leading article; forms shorter than ``min_chars``
    letters or made of one stop word are left out."""
    forms = {title, _SUFFIX.sub("", title)}
    forms |= {f.split(",")[0] for f in forms if "," in f}
    forms |= {_ARTICLE.sub("", f) for f in forms}
    out = set()
    for form in forms:
        alias = normalise(form)
        core = alias.strip()
        if len(core.replace(" ", "")) >= min_chars and core not in _STOP_ALIASES:
            out.add(alias)
    return out


_CAP_WORD = r"(?:[A-Z][\w'\-\.]*[\w]|[A-Z])"
_ENTITY = re.compile(rf"{_CAP_WORD}(?:\s+(?:(?:of|the|de|du|da|van|von|and|for|in)\s+)*{_CAP_WORD})+")


_CONNECTOR = re.compile(r"\s+(?:(?:of|the|de|du|da|van|von|and|for|in)\s+)+")


def extract_entities(text: str) -> set[str]:
    """Multi-word capitalised spans, normalised, with a leading "The" dropped: the whole span
    ("Chief of Protocol of the United States") and its multi-word parts between connectors
    ("United States"). A lightweight stand-in for a named-entity tagger."""
    found = set()
    for match in _ENTITY.finditer(text):
        span = _ARTICLE.sub("", match.group(0))
        for part in (span, *_CONNECTOR.split(span)):
            if " " in part.strip():
                found.add(normalise(part))
    return found


@dataclass(frozen=True)
class GraphEdges:
    """Directed, weighted, typed edges between passage rows."""

    src: np.ndarray  # (E,) int32
    dst: np.ndarray  # (E,) int32
    weight: np.ndarray  # (E,) float32
    type: np.ndarray  # (E,) uint8, values of EDGE_TYPES

    def count(self, kind: str) -> int:
        return int((self.type == EDGE_TYPES[kind]).sum())


def alias_owners(titles: Sequence[str], min_alias_chars: int) -> dict[str, list[int]]:
    """Every normalised alias of the titles (:func:`title_aliases`) -> the rows whose title yields it."""
    owners: dict[str, list[int]] = {}
    for row, title in enumerate(titles):
        for alias in title_aliases(title, min_alias_chars):
            owners.setdefault(alias, []).append(row)
    return owners


def alias_automaton(aliases: Sequence[str] | dict[str, Any]) -> Any:
    """An Aho-Corasick automaton (pyahocorasick) whose matches return the alias itself."""
    import ahocorasick

    automaton = ahocorasick.Automaton()
    for alias in aliases:
        automaton.add_word(alias, alias)
    automaton.make_automaton()
    return automaton


class TitleLinker:
    """Links a text (a question) to the passages whose title it names, with the graph's own aliases.

    HippoRAG seeds its PageRank with the graph nodes of the entities the query names; here the nodes
    are passages, and a question names a passage when it contains an alias of its title ("Were Scott
    Derrickson and Ed Wood of the same nationality?" -> the passages "Scott Derrickson" and "Ed Wood")."""

    def __init__(self, titles: Sequence[str], min_alias_chars: int = DEFAULT_GRAPH["min_alias_chars"]) -> None:
        self.owners = alias_owners(titles, min_alias_chars)
        self.automaton = alias_automaton(self.owners) if self.owners else None

    def rows(self, text: str) -> list[int]:
        """Rows of the passages whose title ``text`` names, ascending."""
        if self.automaton is None:
            return []
        return sorted({row for _, alias in self.automaton.iter(normalise(text)) for row in self.owners[alias]})


def mention_edges(titles: Sequence[str], texts: Sequence[str], *, min_alias_chars: int, max_df: float) -> np.ndarray:
    """(E, 2) int32 pairs (i, j): passage i's text contains an alias of passage j's title (i != j)."""
    owners = alias_owners(titles, min_alias_chars)
    if not owners:
        return np.zeros((0, 2), dtype=np.int32)
    automaton = alias_automaton(owners)
    found: dict[str, set[int]] = {}  # alias -> rows whose text contains it
    for row, text in enumerate(texts):
        for _, alias in automaton.iter(normalise(text)):
            found.setdefault(alias, set()).add(row)
    limit = max(1, int(max_df * len(texts)))
    pairs = {(i, j) for alias, rows in found.items() if len(rows) <= limit
             for i in rows for j in owners[alias] if i != j}
    return np.array(sorted(pairs), dtype=np.int32).reshape(-1, 2)


def entity_edges(texts: Sequence[str], *, max_df: int) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (i, j), both directions, of passages sharing an entity in at most ``max_df`` passages, and
    their weights sum_e 1 / (df_e - 1)."""
    rows_of: dict[str, list[int]] = {}
    for row, text in enumerate(texts):
        for entity in extract_entities(text):
            rows_of.setdefault(entity, []).append(row)
    cols, rows, vals = [], [], []
    for col, members in enumerate(m for m in rows_of.values() if 2 <= len(m) <= max_df):
        rows.extend(members)
        cols.extend([col] * len(members))
        vals.extend([1.0 / np.sqrt(len(members) - 1)] * len(members))
    if not rows:
        return np.zeros((0, 2), dtype=np.int32), np.zeros(0, dtype=np.float32)
    incidence = sparse.csr_matrix((vals, (rows, cols)), shape=(len(texts), max(cols) + 1), dtype=np.float32)
    shared = (incidence @ incidence.T).tocoo()  # (1/sqrt(df-1))^2 summed over shared entities
    keep = shared.row != shared.col
    pairs = np.stack([shared.row[keep], shared.col[keep]], axis=1).astype(np.int32)
    return pairs, shared.data[keep].astype(np.float32)


def build_graph(titles: Sequence[str], texts: Sequence[str], params: dict[str, Any] | None = None) -> GraphEdges:
    """The passage graph of a corpus given as parallel titles and texts (see the module docstring)."""
    p = {**DEFAULT_GRAPH, **(params or {})}
    unknown = sorted(set(p) - set(DEFAULT_GRAPH))
    if unknown:
        raise ConfigError(f"unknown graph settings {unknown}; valid: {sorted(DEFAULT_GRAPH)}")
    mentions = mention_edges(titles, texts, min_alias_chars=int(p["min_alias_chars"]), max_df=float(p["max_df"]))
    parts = [(mentions, np.ones(len(mentions), np.float32), EDGE_TYPES["mention"])]
    if p["entities"]:
        pairs, weights = entity_edges(texts, max_df=int(p["entity_max_df"]))
        parts.append((pairs, weights, EDGE_TYPES["entity"]))
    return GraphEdges(
        src=np.concatenate([e[:, 0] for e, _, _ in parts]).astype(np.int32),
        dst=np.concatenate([e[:, 1] for e, _, _ in parts]).astype(np.int32),
        weight=np.concatenate([w for _, w, _ in parts]).astype(np.float32),
        type=np.concatenate([np.full(len(e), t, np.uint8) for e, _, t in parts]),
    )


class GraphExtra:
    """The ``ExtraBuilder`` of the graph (``tandem index --extras graph``): arrays for ``extras/``,
    settings and sizes for ``manifest.params["graph"]``. It needs no encoder."""

    name = EXTRA_PREFIX
    needs_encoder = False

    def __init__(self, *, on_progress: OnProgress | None = None, **params: Any) -> None:
        """``params``: graph settings over ``DEFAULT_GRAPH``; ``on_progress`` is taken like other extras'
        (reported once, when the graph is built: it takes about a second)."""
        self.on_progress = on_progress
        self.params = {**DEFAULT_GRAPH, **params}
        unknown = sorted(set(self.params) - set(DEFAULT_GRAPH))
        if unknown:
            raise ConfigError(f"unknown graph settings {unknown}; valid: {sorted(DEFAULT_GRAPH)}")

    def __call__(self, store: DocStore, encoder: object = None) -> dict[str, np.ndarray]:
        titles, texts = [], []
        for d in store.docs:  # one pass: each document of a memory-mapped store is parsed when read
            titles.append(d.title)
            texts.append(d.text)
        edges = build_graph(titles, texts, self.params)
        if self.on_progress is not None:
            self.on_progress(len(store.docs), len(store.docs))
        self.params = {**self.params, "mention_edges": edges.count("mention"), "entity_edges": edges.count("entity")}
        return {f"{EXTRA_PREFIX}_src": edges.src, f"{EXTRA_PREFIX}_dst": edges.dst,
                f"{EXTRA_PREFIX}_weight": edges.weight, f"{EXTRA_PREFIX}_type": edges.type}


def load_graph(arrays: dict[str, np.ndarray], n: int) -> dict[str, sparse.csr_matrix]:
    """The stored edge arrays as one (n, n) CSR matrix per edge type (``mention``, ``entity``)."""
    src, dst = np.asarray(arrays["src"]), np.asarray(arrays["dst"])
    weight, kind = np.asarray(arrays["weight"]), np.asarray(arrays["type"])
    out = {}
    for name, code in EDGE_TYPES.items():
        keep = kind == code
        out[name] = sparse.csr_matrix((weight[keep], (src[keep], dst[keep])), shape=(n, n), dtype=np.float32)
    return out


# the extra-array names the graph stores (an index must have them all)
GRAPH_ARRAYS = [f"{EXTRA_PREFIX}_{part}" for part in ("src", "dst", "weight", "type")]
