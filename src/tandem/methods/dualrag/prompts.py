"""DualRAG's prompts, output formats and parsers, kept together (methods.md §3.5).

Four roles, each one user message of Markdown sections (task, rules, output format, worked
examples, then the live slots). The wording and the examples are ours, not the paper's:

- ``reasoner``          outline + question + reasoning history -> JSON {thought, need_retrieve}
- ``entity_identifier`` outline + question + numbered history + known entities
                        -> JSON {entities: [{entity, keywords: [...]}]}
- ``summarizer``        unread documents, then question + history + entity + keywords -> text or ``None``
- ``answer``            outline + question + history -> the answer

``thought`` is the IRCoT-style one-sentence role used by the "without Reasoner" ablation.
The parsers of the replies are in :mod:`tandem.methods.dualrag.parse`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tandem.llm.base import Message
from tandem.methods.answers import ANSWER_MARKER, YES_NO_INSTRUCTION, asks_yes_or_no
from tandem.methods.base import Role, compact_json_examples
from tandem.types import Document

ROLES = ("reasoner", "entity_identifier", "summarizer", "answer")
THOUGHT_ROLE = "thought"  # the one-sentence reasoner of the "without Reasoner" ablation
REPAIR_SUFFIX = ":repair"  # role of a complete_json repair round, e.g. "reasoner:repair"
ELSE_ENTITY = "else"  # the Entity Identifier's bucket for queries that belong to no clear entity
RAW_DOCS_ENTITY = "Related documents"  # the single bucket of the "without Knowledge Outline" ablation
EMPTY = "None"  # what an empty outline / history / entity list reads as in a prompt
NONE_SUMMARIES = frozenset({"", "none", "none."})  # summaries discarded by the exact rule
ANSWER_STYLES = ("short", "complete")
# stop strings: replies are one line of JSON / one paragraph of notes; these cut a run-on into the
# next example before it costs generation time (a JSON object itself never holds a blank line)
JSON_STOP = ("\n\n",)
SUMMARY_STOP = ("\n\n#", "\nQuestion:")

_TEXT: dict[str, Any] = {"type": "string", "minLength": 1}
REASONER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"thought": _TEXT, "need_retrieve": {"type": "boolean"}},
    "required": ["thought", "need_retrieve"],
}
ENTITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"entities": {"type": "array", "minItems": 1, "maxItems": 5, "items": {
        "type": "object",
        "properties": {"entity": {**_TEXT, "maxLength": 60},
                       "keywords": {"type": "array", "minItems": 1, "maxItems": 3, "items": _TEXT}},
        "required": ["entity", "keywords"],
    }}},
    "required": ["entities"],
}
SUMMARY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"notes": _TEXT}, "required": ["notes"]}
# Structured roles: schema, the token budget its strings are bounded by (the max_tokens of a
# grammar-decoded reply, which then cannot be cut off), and the cap for prompt-only backends.
REASONER = Role("reasoner", REASONER_SCHEMA, budget=1024, prompt_max_tokens=128)
# The paper caps no entity list (``max_entities`` null); a grammar needs a bound, so a schema-decoded reply holds at
# most DECODED_ENTITIES (5; a prompt-only reply is not capped), each keeping ~1,000 tokens of budget.
DECODED_ENTITIES = 5
_ENTITY_TOKENS = 1024
ENTITY_IDENTIFIER = Role("entity_identifier", ENTITY_SCHEMA, budget=DECODED_ENTITIES * _ENTITY_TOKENS,
                         prompt_max_tokens=160)


def entity_role(max_entities: int | None) -> Role:
    """The Entity Identifier's role for a cap on entities: ``None`` = the decoding bound alone (DECODED_ENTITIES);
    a cap n puts maxItems = n in the schema (the budget scales with it)."""
    if max_entities is None:
        return ENTITY_IDENTIFIER
    entities = {**ENTITY_SCHEMA["properties"]["entities"], "maxItems": max_entities}
    schema = {**ENTITY_SCHEMA, "properties": {"entities": entities}}
    return Role(ENTITY_IDENTIFIER.name, schema, budget=max_entities * _ENTITY_TOKENS,
                prompt_max_tokens=ENTITY_IDENTIFIER.prompt_max_tokens)
SUMMARIZER = Role("summarizer", SUMMARY_SCHEMA, budget=1536, prompt_max_tokens=160)
STRUCTURED_ROLES = {r.name: r for r in (REASONER, ENTITY_IDENTIFIER, SUMMARIZER)}
SCHEMAS: dict[str, dict[str, Any]] = {name: role.bounded for name, role in STRUCTURED_ROLES.items()}


def _prompt(*sections: tuple[str, str]) -> str:
    """Markdown sections ``## title`` + body, in order."""
    return compact_json_examples("\n\n".join(f"## {title}\n\n{body.strip()}" for title, body in sections) + "\n")


def _lines(*lines: str) -> str:
    return "\n".join(lines)


def _js(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# Knowledge outline and reasoning history as prompt text

def render_outline(outline: Mapping[str, Sequence[str]]) -> str:
    """``#### entity`` then its summaries separated by blank lines, one block per entity; ``None`` if empty."""
    blocks = [f"#### {entity}\n\n" + "\n\n".join(items) for entity, items in outline.items()]
    return "\n\n".join(blocks) if blocks else EMPTY


def history_plain(thoughts: Sequence[str]) -> str:
    return "\n".join(thoughts) if thoughts else EMPTY


def history_numbered(thoughts: Sequence[str]) -> str:
    return "\n".join(f"{i}. {t}" for i, t in enumerate(thoughts, 1)) if thoughts else EMPTY


def history_steps(thoughts: Sequence[str]) -> str:
    return "\n\n".join(f"#### Step {i}\n\n{t}" for i, t in enumerate(thoughts, 1)) if thoughts else EMPTY


def render_doc(doc: Document) -> str:
    """A document as the summarizer (and the raw-documents outline) reads it."""
    return f"##### {doc.title}\n\n{doc.text}" if doc.title else doc.text


# Reasoner

REASONER_HEAD = _prompt(
    ("Role", """
You are the reasoning half of a question-answering team. A retrieval assistant collects knowledge
for you and files it under the entity it is about (a person, place, organisation, work, event...).
You read that knowledge, take the next step of reasoning, and say whether more retrieval is needed.
"""),
    ("Rules", """
- Reason only from the Known Knowledge below. Never fill a gap with a guess or with memory.
- Go step by step. Each reply continues the Reasoning History; do not repeat it.
- Stop this step as soon as either (a) the knowledge answers the question: give the answer and set
  "need_retrieve" to false, or (b) a fact you need is missing: name exactly what is missing and set
  "need_retrieve" to true.
"""),
    ("Output format", """
Reply with one JSON object on one line, starting with { and nothing else:
{"thought": "<your reasoning for this step, one to three sentences>", "need_retrieve": true or false}
"""),
    ("Examples", """
### Example A

Question: In which country was the director of the film Stalker (1979) born?
Known Knowledge: None
Reasoning History: None
Output: {"thought": "I first need to know who directed Stalker (1979); then where that person was born.", "need_retrieve": true}

### Example B

Question: In which country was the director of the film Stalker (1979) born?
Known Knowledge:
#### Stalker (1979 film)

Stalker is a 1979 Soviet science fiction film directed by Andrei Tarkovsky.
Reasoning History:
I first need to know who directed Stalker (1979); then where that person was born.
Output: {"thought": "Stalker (1979) was directed by Andrei Tarkovsky. I still need the place where Andrei Tarkovsky was born.", "need_retrieve": true}

### Example C

Question: In which country was the director of the film Stalker (1979) born?
Known Knowledge:
#### Stalker (1979 film)

Stalker is a 1979 Soviet science fiction film directed by Andrei Tarkovsky.

#### Andrei Tarkovsky

Andrei Tarkovsky was born in Zavrazhye, a village in Russia.
Reasoning History:
I first need to know who directed Stalker (1979); then where that person was born.
Stalker (1979) was directed by Andrei Tarkovsky. I still need the place where Andrei Tarkovsky was born.
Output: {"thought": "Andrei Tarkovsky was born in Zavrazhye, Russia, so the director of Stalker was born in Russia.", "need_retrieve": false}
"""),
)


def reasoner_messages(outline: str, question: str, thoughts: Sequence[str]) -> list[Message]:
    """The Reasoner's prompt: the fixed head, then the live question, knowledge and history."""
    live = _prompt(("Your turn", _lines(f"Question: {question}", "Known Knowledge:", outline,
                                        "Reasoning History:", history_plain(thoughts), "Output:")))
    return [Message("user", REASONER_HEAD + "\n" + live)]


# Entity Identifier

ENTITY_HEAD = _prompt(
    ("Role", """
You plan retrieval for a question-answering team. Given the question, the knowledge gathered so far
and the latest reasoning, decide which knowledge is still missing and write search keywords for it.
"""),
    ("Rules", f"""
- Organise the missing knowledge around key entities: people, places, organisations, works, events
  or other proper nouns. Give each entity the keywords that would find its missing facts.
- The keywords go to a dense (semantic) search engine: short phrases or questions that read like the
  passage you hope to find.
- Cover every missing fact, but only what this question needs. For one fact, write at most two
  wordings.
- To search more about an entity listed under Known Entities, reuse its name exactly as listed.
- If the missing knowledge has no clear entity yet, put its keywords under the entity "{ELSE_ENTITY}".
"""),
    ("Output format", """
Reply with one JSON object on one line, starting with { and nothing else:
{"entities": [{"entity": "<entity name>", "keywords": ["<keyword>", "<another wording>"]}]}
"""),
    ("Examples", """
### Example A

Question: Which was founded earlier, the University of Oslo or Uppsala University?
Known Knowledge: None
Reasoning History:
1. I need the founding years of the University of Oslo and of Uppsala University.
Known Entities: None
Output: {"entities": [{"entity": "University of Oslo", "keywords": ["University of Oslo founded in", "year the University of Oslo was established"]}, {"entity": "Uppsala University", "keywords": ["Uppsala University founded in", "year Uppsala University was established"]}]}

### Example B

Question: In which country was the director of the film Stalker (1979) born?
Known Knowledge:
#### Stalker (1979 film)

Stalker is a 1979 Soviet science fiction film directed by Andrei Tarkovsky.
Reasoning History:
1. I first need to know who directed Stalker (1979); then where that person was born.
2. Stalker (1979) was directed by Andrei Tarkovsky. I still need the place where Andrei Tarkovsky was born.
Known Entities: "Stalker (1979 film)"
Output: {"entities": [{"entity": "Andrei Tarkovsky", "keywords": ["Andrei Tarkovsky birthplace", "Where was Andrei Tarkovsky born?"]}]}

### Example C

Question: Who designed the bridge that was the longest suspension bridge in the world in 1960?
Known Knowledge: None
Reasoning History:
1. I need to find which bridge was the longest suspension bridge in 1960, then its designer.
Known Entities: None
Output: {"entities": [{"entity": "else", "keywords": ["longest suspension bridge in the world in 1960", "world's longest suspension span 1960"]}]}
"""),
)


def entity_messages(outline: str, question: str, thoughts: Sequence[str], known: Sequence[str]) -> list[Message]:
    """The Entity Identifier's prompt with the outline's entities (except "else") as Known Entities."""
    names = ", ".join(_js(e) for e in known) if known else EMPTY
    live = _prompt(("Your turn", _lines(f"Question: {question}", "Known Knowledge:", outline, "Reasoning History:",
                                        history_numbered(thoughts), f"Known Entities: {names}", "Output:")))
    return [Message("user", ENTITY_HEAD + "\n" + live)]


# Knowledge Summarizer

SUMMARIZER_HEAD = _prompt(
    ("Role", """
You keep the notes of a question-answering team. A search for one entity returned the documents below.
Write down what in them helps with the question, and drop the rest.
"""),
    ("Rules", f"""
- Keep facts about the entity and the keywords, including facts that are only a stepping stone: a
  multi-hop question often needs a fact that does not answer it directly (who directed a film, where
  a company is based...).
- Copy the important wording from the documents; keep every name exactly as written there.
- No comments, opinions or guesses; add nothing the documents do not say.
- If nothing in the documents is useful, the notes are the single word {EMPTY}.
"""),
    ("Output format", f"""
Reply with one JSON object on one line, starting with {{ and nothing else:
{{"notes": "<a few sentences of notes, or {EMPTY}>"}}
"""),
    ("Examples", f"""
### Example A

Documents:
##### Uppsala University

Uppsala University is a public research university in Uppsala, Sweden. Founded in 1477, it is the oldest university in Sweden.

##### Uppsala Cathedral

Uppsala Cathedral is a cathedral in the centre of Uppsala, Sweden.

Question: Which was founded earlier, the University of Oslo or Uppsala University?
Entity: Uppsala University
Keywords: Uppsala University founded in, year Uppsala University was established
Output: {{"notes": "Uppsala University, a public research university in Uppsala, Sweden, was founded in 1477."}}

### Example B

Documents:
##### Oslo Opera House

The Oslo Opera House is the home of the Norwegian National Opera and Ballet.

Question: Which was founded earlier, the University of Oslo or Uppsala University?
Entity: University of Oslo
Keywords: University of Oslo founded in
Output: {{"notes": "{EMPTY}"}}

### Example C

Documents:
##### Stalker (1979 film)

Stalker is a 1979 Soviet science fiction film directed by Andrei Tarkovsky, with a screenplay by Boris and Arkady Strugatsky.

Question: In which country was the director of the film Stalker (1979) born?
Entity: Stalker (1979 film)
Keywords: Stalker 1979 film director
Output: {{"notes": "Stalker is a 1979 Soviet science fiction film directed by Andrei Tarkovsky."}}
"""),
)


def summarizer_messages(question: str, thoughts: Sequence[str], entity: str, keywords: Sequence[str],
                        docs: Sequence[Document]) -> list[Message]:
    """The Knowledge Summarizer's prompt for one entity and the documents it has not read yet."""
    body = "\n\n".join(render_doc(d) for d in docs)
    live = _prompt(("Your turn", _lines("Documents:", body, "", f"Question: {question}", "Reasoning History:",
                                        history_steps(thoughts), f"Entity: {entity}",
                                        f"Keywords: {', '.join(keywords)}", "Output:")))
    return [Message("user", SUMMARIZER_HEAD + "\n" + live)]


# Answer

ANSWER_HEAD = {
    "short": _prompt(("Role", """
You answer a question from the knowledge your team retrieved and the reasoning done so far.
Reply with the answer only: a name, a date, a number or a short phrase; "yes" or "no" for a yes/no
question. No sentence, no explanation.
""")),
    "complete": _prompt(("Role", """
You answer a question from the knowledge your team retrieved and the reasoning done so far.
Read the knowledge carefully and write a complete answer that follows from your earlier reasoning.
""")),
}


#: the short head for a model whose answer style is ``instruction_yes_no`` (the 1.5B's): yes/no is not named
#: for every question - the Answer section asks for it only where :func:`asks_yes_or_no` (as CoopRAG's answer)
SHORT_HEAD_NO_VERDICT = ANSWER_HEAD["short"].replace('; "yes" or "no" for a yes/no\nquestion. ', ".\n")

#: the heads without the reasoning history (``answer_reasoning=false``)
ANSWER_HEAD_KNOWLEDGE_ONLY = {
    "short": _prompt(("Role", """
You answer a question from the knowledge your team retrieved.
Reply with the answer only: a name, a date, a number or a short phrase; "yes" or "no" for a yes/no
question. No sentence, no explanation.
""")),
    "complete": _prompt(("Role", """
You answer a question from the knowledge your team retrieved.
Read the knowledge carefully and write a complete answer that follows from it.
""")),
}


def answer_messages(outline: str, question: str, thoughts: Sequence[str] | None, style: str = "short",
                    model_style: str = "system") -> list[Message]:
    """The Answer agent's prompt; ``style`` "short" (our default) or "complete" (the paper's); ``thoughts``
    None: no reasoning section and a head that names none (``answer_reasoning=false``). ``model_style`` the
    answer LLM's (:func:`tandem.methods.answers.answer_style`): with ``instruction_yes_no`` a short answer's
    head names no yes/no and its Answer section asks "Answer yes or no." only where the question asks it."""
    if style == "short" and model_style == "instruction_yes_no" and thoughts is not None:
        live = _prompt(("Knowledge", outline), ("Question", question), ("Your reasoning", history_steps(thoughts)),
                       ("Answer", YES_NO_INSTRUCTION if asks_yes_or_no(question) else ""))
        return [Message("user", SHORT_HEAD_NO_VERDICT + "\n" + live)]
    if thoughts is None:
        live = _prompt(("Knowledge", outline), ("Question", question), ("Answer", ""))
        return [Message("user", ANSWER_HEAD_KNOWLEDGE_ONLY[style] + "\n" + live)]
    live = _prompt(("Knowledge", outline), ("Question", question), ("Your reasoning", history_steps(thoughts)),
                   ("Answer", ""))
    return [Message("user", ANSWER_HEAD[style] + "\n" + live)]


# "Without Reasoner" ablation: IRCoT-style one sentence per step

THOUGHT_HEAD = _prompt(("Role", f"""
You answer multi-hop questions by reasoning over the background knowledge one sentence at a time.
Write ONLY the next sentence of the reasoning. When the reasoning reaches the answer, write
"{ANSWER_MARKER} " followed by the answer in a few words.
"""))


def thought_messages(outline: str, question: str, thoughts: Sequence[str]) -> list[Message]:
    """One-sentence reasoning step over the outline (the reasoning so far ends the message)."""
    live = _prompt(("Background knowledge", outline), ("Question", question))
    return [Message("user", THOUGHT_HEAD + "\n" + live + "\nReasoning:\n" + "".join(t + "\n" for t in thoughts))]
