"""R²AG's retrieval-aware prompt, its placeholder token and its parser (methods.md §2.4).

The prompt follows the authors' template (paraphrased): an instruction to answer only from the
search results (some may be irrelevant) and that a similarity marker precedes each one; one line per
document ``[i]similarity: <P>(Title: t) text``; the output-only-the-answer instruction again; then
``Question: q`` and ``Answer:`` — the question comes **after** the documents, as in their template.
It is wrapped in the tokenizer's chat template (``template="chat"``, for instruct models such as
SmolLM2-Instruct) or the authors' Alpaca wrapper (``template="alpaca"``).

The placeholder ``<P>`` must be ONE token id that ordinary text never produces, because the
injection overwrites the input embedding at exactly those positions. The authors use ``<unk>``
(id 0 in Llama). SmolLM2's unk is ``<|endoftext|>``, which is also an end-of-text id, so the default
is the first *non-end* single-token special from ``PLACEHOLDER_CANDIDATES`` found in the vocabulary
(``<reponame>``, id 4, for SmolLM2: a StarCoder metadata token that chat text never contains;
``<|vision_pad|>`` for the Qwen2.5 models of the ladder: a vision-padding token a text chat never holds).
Placeholder positions are not found by searching ids: the prompt is rendered with a private-use
sentinel character at each slot, split there, and the pieces are tokenized separately around the
placeholder id, so a document that happens to contain the placeholder's text cannot shift a slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tandem.errors import ConfigError
from tandem.methods.answers import clean_answer
from tandem.types import Document

TEMPLATES = ("chat", "alpaca")
PLACEHOLDER_CANDIDATES = ("<unk>", "<reponame>", "<filename>", "<gh_stars>", "<issue_start>", "<|reserved_special_token_0|>",
                          "<|vision_pad|>")
SENTINEL = "\ue000"  # private-use character marking a placeholder slot while rendering

INSTRUCTION = (
    "Answer the question using only the search results below; some of them may be irrelevant. "
    "In front of each search result is a marker holding its similarity information. "
    "Reply with the answer only: a name, a date, a number or a short phrase."
)
REPEAT = "Reply with the answer only."
ALPACA = "### Instruction:\n{prompt}\n\n### Response:\n"

parse_answer = clean_answer  # the authors score the first line of the output (a label alone on it: the next)


@dataclass(frozen=True)
class PromptIds:
    """A tokenized R²AG prompt: ids, the placeholder positions (one per document, in order) and the
    text with the placeholder token shown (for traces)."""

    ids: list[int]
    positions: list[int]
    text: str


def shorten(text: str, words: int | None) -> str:
    """The first ``words`` words of ``text`` (all of it when ``words`` is None)."""
    if words is None:
        return text
    parts = text.split()
    return text if len(parts) <= words else " ".join(parts[:words]) + " ..."


def prompt_text(question: str, docs: Sequence[Document], slot: str, doc_words: int | None = None) -> str:
    """The user prompt with ``slot`` before each document."""
    lines = []
    for i, d in enumerate(docs, 1):
        title = d.title.replace(SENTINEL, "")
        body = shorten(d.text.replace(SENTINEL, ""), doc_words)
        lines.append(f"[{i}]similarity: {slot}(Title: {title}) {body}" if title else f"[{i}]similarity: {slot}{body}")
    return f"{INSTRUCTION}\n\n" + "\n".join(lines) + f"\n\n{REPEAT}\nQuestion: {question.replace(SENTINEL, '')}\nAnswer:"


def choose_placeholder(tokenizer: Any, end_ids: Sequence[int], wanted: str | None = None) -> tuple[str, int]:
    """(token, id) of the placeholder: ``wanted`` if given, else the first candidate that is one
    special token and not an end-of-text id. Raises ConfigError naming the problem."""
    vocab = tokenizer.get_vocab()
    for tok in ([wanted] if wanted else PLACEHOLDER_CANDIDATES):
        if tok not in vocab:
            if wanted:
                raise ConfigError(f"placeholder {wanted!r} is not in the tokenizer's vocabulary")
            continue
        tid = int(vocab[tok])
        single = tokenizer(tok, add_special_tokens=False)["input_ids"] == [tid]
        if wanted and not single:
            raise ConfigError(f"placeholder {wanted!r} does not tokenize to one id; choose a special token")
        if single and (wanted or tid not in end_ids):
            return tok, tid
    raise ConfigError(f"no placeholder token found among {list(PLACEHOLDER_CANDIDATES)}: set placeholder=TOKEN "
                      "(a single special token the text never contains)")


def render(tokenizer: Any, user: str, template: str) -> str:
    """``user`` wrapped in the chat template (with the assistant generation prompt) or the Alpaca wrapper."""
    if template not in TEMPLATES:
        raise ConfigError(f"unknown template {template!r}; templates: {list(TEMPLATES)}")
    if template == "chat":
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError("the tokenizer has no chat template: use template=alpaca")
        return str(tokenizer.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True,
                                                 tokenize=False))
    return ALPACA.format(prompt=user)


def build_prompt(tokenizer: Any, question: str, docs: Sequence[Document], placeholder: tuple[str, int], *,
                 template: str = "chat", doc_words: int | None = None) -> PromptIds:
    """Token ids of the R²AG prompt with ``placeholder`` id at one slot per document (see module doc)."""
    rendered = render(tokenizer, prompt_text(question, docs, SENTINEL, doc_words), template)
    pieces = rendered.split(SENTINEL)
    if len(pieces) != len(docs) + 1:
        raise ConfigError(f"the {template} template changed the number of placeholder slots "
                          f"({len(pieces) - 1} for {len(docs)} documents)")
    ids: list[int] = []
    positions: list[int] = []
    for i, piece in enumerate(pieces):
        ids.extend(tokenizer(piece, add_special_tokens=False)["input_ids"] if piece else [])
        if i < len(docs):
            positions.append(len(ids))
            ids.append(placeholder[1])
    return PromptIds(ids, positions, placeholder[0].join(pieces))
