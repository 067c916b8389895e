"""The Knowledge Summarizer in its own words or in the documents' (``summary="sentences"``).

The paper's Summarizer writes notes about an entity from the documents it read (``summary="notes"``,
``prompts.SUMMARIZER``). A small model asked to write them often copies the question's wording and fills
its gap with a name from nowhere ("... directed by Andrei Tarkovsky", the name of a worked example), and
the Reasoner then reasons from that. With ``summary="sentences"`` the documents are shown with numbered
sentences and the Summarizer replies with the numbers of the useful ones; the notes are those sentences,
word for word, under their documents' titles. The role, its decision (what in the documents helps with
the question, stepping stones included) and its place in the loop are the paper's; only what it may
write is narrowed, so no note can say what no document says.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tandem.errors import ParseError
from tandem.llm.base import Message
from tandem.llm.jsonparse import parse_json
from tandem.methods.answers import split_sentences
from tandem.methods.base import Role
from tandem.methods.dualrag import prompts as P
from tandem.types import Document

MAX_PICKS = 8  # sentences one reply may pick
MAX_NUMBER = 999  # the largest sentence number a reply may hold (the documents of one call have fewer)

PICKS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"sentences": {"type": "array", "maxItems": MAX_PICKS,
                                 "items": {"type": "integer", "minimum": 1, "maximum": MAX_NUMBER}}},
    "required": ["sentences"],
}
SUMMARIZER_PICKS = Role(P.SUMMARIZER.name, PICKS_SCHEMA, budget=64, prompt_max_tokens=64)

HEAD = P._prompt(
    ("Role", """
You keep the notes of a question-answering team. A search for one entity returned the documents below;
every sentence in them is numbered. Pick the sentences that help with the question; your team reads
those sentences, word for word, and nothing else from these documents.
"""),
    ("Rules", """
- Pick sentences about the entity and the keywords, including ones that are only a stepping stone: a
  multi-hop question often needs a fact that does not answer it directly (who directed a film, where
  a company is based...).
- Pick the fewest sentences that hold those facts; a name's sentence counts even when it only says who
  or what the entity is.
- If no sentence is useful, pick none: an empty list.
"""),
    ("Output format", f"""
Reply with one JSON object on one line, starting with {{ and nothing else:
{{"sentences": [<the numbers of the useful sentences, at most {MAX_PICKS}>]}}
"""),
    ("Examples", """
### Example A

Documents:
##### Uppsala University

[1] Uppsala University is a public research university in Uppsala, Sweden. [2] Founded in 1477, it is the oldest university in Sweden. [3] It has nine faculties.

##### Uppsala Cathedral

[4] Uppsala Cathedral is a cathedral in the centre of Uppsala, Sweden.

Question: Which was founded earlier, the University of Oslo or Uppsala University?
Entity: Uppsala University
Keywords: Uppsala University founded in, year Uppsala University was established
Output: {"sentences":[1,2]}

### Example B

Documents:
##### Oslo Opera House

[1] The Oslo Opera House is the home of the Norwegian National Opera and Ballet.

Question: Which was founded earlier, the University of Oslo or Uppsala University?
Entity: University of Oslo
Keywords: University of Oslo founded in
Output: {"sentences": []}

### Example C

Documents:
##### Solaris (novel)

[1] Solaris is a 1961 science fiction novel by Stanisław Lem.

##### Stalker (1979 film)

[2] Stalker is a 1979 Soviet science fiction film. [3] It was directed by Andrei Tarkovsky, with a screenplay by Boris and Arkady Strugatsky.

Question: In which country was the director of the film Stalker (1979) born?
Entity: Stalker (1979 film)
Keywords: Stalker 1979 film director
Output: {"sentences":[2,3]}
"""),
)


def numbered(docs: Sequence[Document]) -> tuple[str, list[tuple[str, str]]]:
    """The documents as the prompt shows them (every sentence numbered from 1 across them) and the
    ``(title, sentence)`` each number stands for (number n is entry n - 1)."""
    lines: list[tuple[str, str]] = []
    blocks = []
    for doc in docs:
        body = []
        for sentence in split_sentences(doc.text):
            lines.append((doc.title, sentence))
            body.append(f"[{len(lines)}] {sentence}")
        blocks.append(P.render_doc(Document(id=doc.id, title=doc.title, text=" ".join(body))))
    return "\n\n".join(blocks), lines


def messages(question: str, thoughts: Sequence[str], entity: str, keywords: Sequence[str],
             docs: Sequence[Document]) -> tuple[list[Message], list[tuple[str, str]]]:
    """The sentence-picking Summarizer's prompt for one entity's unread documents, and the numbered sentences."""
    body, lines = numbered(docs)
    live = P._prompt(("Your turn", P._lines("Documents:", body, "", f"Question: {question}", "Reasoning History:",
                                            P.history_steps(thoughts), f"Entity: {entity}",
                                            f"Keywords: {', '.join(keywords)}", "Output:")))
    return [Message("user", HEAD + "\n" + live)], lines


def parse_picks(text: str) -> list[int]:
    """The reply -> the sentence numbers it picks (an empty list included); ParseError when unreadable."""
    value = parse_json(text, {"type": "object"})
    picks = value.get("sentences") if isinstance(value, dict) else None
    if not isinstance(picks, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in picks):
        raise ParseError("no list of sentence numbers 'sentences'", raw=text)
    return picks


def notes(lines: Sequence[tuple[str, str]], picks: Sequence[int]) -> str:
    """The picked sentences in document order, each document's under its title (``Title: s1 s2``);
    numbers outside the documents are ignored; ``None`` (the empty summary) when nothing is left."""
    chosen = sorted({n for n in picks if 1 <= n <= len(lines)})
    groups: dict[str, list[str]] = {}
    for n in chosen:
        title, sentence = lines[n - 1]
        groups.setdefault(title, []).append(sentence)
    return "\n".join(f"{title}: {' '.join(s)}" if title else " ".join(s) for title, s in groups.items()) or P.EMPTY
