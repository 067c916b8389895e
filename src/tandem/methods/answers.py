"""How answers are asked for and read, shared by every method: the brief answer prompt and its per-model
styles, the answer marker of chain-of-thought methods (IRCoT's "So the answer is:"), and the readers that
take a short answer out of a reply (:func:`clean_answer`, :func:`first_sentence`, :func:`extract_answer`)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any, get_args

from tandem.llm.base import LLMRequest, Message, tells_first_tokens
from tandem.llm.settings import AnswerStyle
from tandem.methods.base import format_docs, mark_exchange, record_call
from tandem.types import Document, Step

#: the chain-of-thought answer marker (IRCoT's; Iter-RetGen, DualRAG's ablation and the demos use it too)
ANSWER_MARKER = "So the answer is:"
#: the one-shot chain-of-thought example IRCoT and Iter-RetGen show before the real task
COT_DEMO = (
    "Documents:\n"
    "[1] Irène Joliot-Curie: Irène Joliot-Curie was a French chemist, the elder daughter of Marie and Pierre Curie.\n"
    "[2] Marie Curie: Marie Curie was born Maria Skłodowska in Warsaw in 1867.\n"
    "Question: In which city was the mother of Irène Joliot-Curie born?\n"
    "Reasoning:\n"
    "Irène Joliot-Curie was the daughter of Marie Curie.\n"
    "Marie Curie was born in Warsaw.\n"
    f"{ANSWER_MARKER} Warsaw"
)

#: the answer instruction after the question (style ``instruction``): asks for the answer's words only and
#: does not name yes or no - a system prompt that did made Qwen2.5-1.5B answer "yes" or "no" to over half of
#: the questions that ask neither (docs/llm.md, "Answer prompts per model")
BRIEF_INSTRUCTION = "Answer with a few words only (a name, a date, a number or a short phrase), not a sentence."
#: style ``instruction_yes_no``: the instruction in its place where :func:`asks_yes_or_no` (only there, so no
#: other question is invited to answer "yes")
YES_NO_INSTRUCTION = "Answer yes or no."
#: style ``system``: the same asked in a system prompt, the user turn ending at ``Answer:`` - SmolLM2-135M's
#: (on it the instruction style scored lower, and lost the demo's answer)
BRIEF_SYSTEM = (
    "You answer questions as briefly as possible: a name, a date, a number or a short phrase, "
    "never a full sentence and never an explanation. If the question asks yes or no, answer "
    "'yes' or 'no'."
)
ANSWER_STYLES: tuple[str, ...] = get_args(AnswerStyle)
#: ``reason_choices``: the instruction for a question that offers a choice between two named things, in place
#: of the few-words one - a line of facts first, then the marker (docs/methods/baselines-measured.md, "Choice questions")
CHOICE_INSTRUCTION = ("Think briefly: write one short line with the relevant fact about each of the two, then "
                      f'"{ANSWER_MARKER}" and the answer in a few words (a name, not a sentence).')
#: the answer tokens a reasoned reply may take (its facts, the marker and the answer)
REASONING_TOKENS = 128
#: ``yes_no_threshold``: the likeliest first tokens asked for (the 1.5B puts "Yes", "No", "yes", "no" there)
FIRST_TOKENS = 4
#: a margin noted in a trace is clipped to +-this (one side absent from the first tokens: infinite)
MARGIN_CLIP = 100.0

# a question that opens with an auxiliary verb asks yes or no, unless it offers a choice ("Is X or Y older?")
_AUXILIARY = re.compile(r"^\W*(?:is|are|was|were|do|does|did|can|could|has|have|had|will|would|should|shall|may|"
                        r"might|must)\b", re.IGNORECASE)
_CHOICE = re.compile(r"\bor\b", re.IGNORECASE)


def asks_yes_or_no(question: str) -> bool:
    """Whether ``question`` asks yes or no: it opens with an auxiliary verb ("Were Scott Derrickson and Ed Wood
    of the same nationality?") and offers no choice ("Is Gasherbrum II or Nuptse closer to Everest?" asks
    which). On HotpotQA dev500 questions 250-499 it finds 79 of the 80 whose answer is yes or no, and no other
    (the one missed: "Both Sorbaria and Goldenrod are a genus of ...?"); docs/llm.md, "Yes/no questions"."""
    return bool(_AUXILIARY.match(question)) and not _CHOICE.search(question)


def offers_a_choice(question: str) -> bool:
    """Whether ``question`` offers a choice with "or" ("Who was born first, Emma Bull or Virginia Woolf?", "Is
    Gasherbrum II or Nuptse closer to Everest?"). On dev500 it picks 119 of questions 250-499 (comparison) and
    5 of 0-249, none of MuSiQue-100 or NQ-open's first 100."""
    return bool(_CHOICE.search(question))


def reasons_choice(question: str, style: str, enabled: bool) -> bool:
    """Whether the brief answer prompt asks ``question`` with :data:`CHOICE_INSTRUCTION`: ``reason_choices`` on,
    an instruction style (not SmolLM2's ``system``) and a question that :func:`offers_a_choice`."""
    return enabled and style != "system" and offers_a_choice(question)


def reasoned_answer(text: str) -> str:
    """The answer of a reasoned reply: after its marker, else its last line (a reply cut before the marker)."""
    found = extract_answer(text)
    if found is not None:
        return found
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return clean_answer(lines[-1]) if lines else ""


def yes_no_margin(first_tokens: Sequence[tuple[str, float]]) -> float | None:
    """log P(yes) - log P(no) of a reply's first token, from its likeliest first tokens (token text, natural-log
    probability; :attr:`tandem.llm.base.LLMResponse.first_tokens`): each side sums the probability of its
    forms ("Yes", " yes", ...). None where neither side is among them; +-inf where only one is."""
    yes, no = (token_mass(first_tokens, lambda token, side=side: token.strip().lower() == side)
               for side in ("yes", "no"))
    if not yes and not no:
        return None
    return (math.log(yes) if yes else -math.inf) - (math.log(no) if no else -math.inf)


def token_mass(first_tokens: Sequence[tuple[str, float]], matches: Callable[[str], bool]) -> float:
    """The probability of the first tokens (text, log-probability) whose text ``matches``, summed."""
    return sum(math.exp(logprob) for token, logprob in first_tokens if matches(token))


def models_own(llm: Any, name: str, setting: Any) -> Any:
    """A setting whose value ``"model"`` means the model's own: the LLM's ``name`` attribute (set by the local
    backend from the model's ladder entry; None where it has none); any other value as it is."""
    return getattr(llm, name, None) if setting == "model" else setting


def yes_no_threshold(llm: Any, setting: float | str) -> float | None:
    """The threshold a yes/no question's first-token margin is read with (:func:`verdict_by_margin`), None for
    the greedy reply: ``setting`` a number, ``"model"`` the model's own (a ``yes_no_threshold`` attribute, set by
    the local backend from its ladder entry; none: None), ``"off"`` None."""
    value = models_own(llm, "yes_no_threshold", setting)
    return float(value) if isinstance(value, int | float) else None


FirstTokens = tuple[tuple[str, float], ...]


def ask_first_tokens(llm: Any, step: Step, messages: Sequence[Message], k: int) -> tuple[FirstTokens | None, str]:
    """The answer prompt ``messages``' k likeliest first tokens (text, log-probability), the call recorded in
    ``step`` as the answer role's; (None, why) where ``llm`` does not tell them
    (:func:`tandem.llm.base.tells_first_tokens`)."""
    if not tells_first_tokens(llm):
        return None, f"{getattr(llm, 'spec', 'the LLM')} does not tell its first tokens' probabilities"
    request = LLMRequest(messages=tuple(messages), max_tokens=1, first_tokens=k)
    return record_call(llm, step, "answer", request).first_tokens, ""


def verdict_by_margin(llm: Any, step: Step, messages: Sequence[Message], threshold: float) -> tuple[str | None, str]:
    """A yes/no question's answer by the first-token margin of its answer prompt ``messages``
    (:func:`yes_no_margin`, the :data:`FIRST_TOKENS` likeliest first tokens asked for): "yes" above
    ``threshold``, else "no"; the margin is noted in ``step.notes["yes_no_margin"]``. Returns (verdict, "")
    or, where ``llm`` does not tell its first tokens' probabilities (:func:`tandem.llm.base.tells_first_tokens`)
    or neither yes nor no is among them, (None, why) - the caller then asks for a reply and marks it as the
    answer role's fallback."""
    tokens, why = ask_first_tokens(llm, step, messages, FIRST_TOKENS)
    if tokens is None:
        return None, why
    margin = yes_no_margin(tokens)
    if margin is None:
        return None, f"neither yes nor no among the {FIRST_TOKENS} likeliest first tokens"
    step.notes["yes_no_margin"] = round(max(-MARGIN_CLIP, min(MARGIN_CLIP, margin)), 3)  # JSON has no infinity
    mark_exchange(step, "answer", "parsed")
    return ("yes" if margin > threshold else "no"), ""


def answer_style(llm: Any) -> str:
    """The answer prompt's style for ``llm``: the model's own (``answer_style``, set by the local backend from
    its ladder entry or ``--llm-opt answer_style=``), else ``instruction``."""
    style = getattr(llm, "answer_style", None)
    return style if style in ANSWER_STYLES else "instruction"


def brief_answer_messages(question: str, docs: Sequence[Document] = (), notes: str = "",
                          style: str = "instruction", question_first: bool = False,
                          reason_choices: bool = False) -> list[Message]:
    """The answer prompt shared by Direct, NativeRAG, Oracle and IRCoT's fallback answer: the documents, notes
    and question, then :data:`BRIEF_INSTRUCTION` (``style="instruction"``, one user turn; with
    ``"instruction_yes_no"``, :data:`YES_NO_INSTRUCTION` where the question :func:`asks_yes_or_no`) or a
    system prompt (``"system"``, :data:`BRIEF_SYSTEM`), and the ``Answer:`` cue. ``question_first`` states
    the question before the documents as well, so the model reads them knowing what is asked; with
    ``reason_choices`` a question that offers a choice ends :data:`CHOICE_INSTRUCTION` (:func:`reasons_choice`;
    read the reply with :func:`reasoned_answer`)."""
    parts = [f"Question: {question}"] if question_first and (docs or notes) else []
    if docs:
        parts.append("Use these documents to answer.\n" + format_docs(docs))
    if notes:
        parts.append(notes)
    if style == "system":
        parts.append(f"Question: {question}\nAnswer:")
        return [Message("system", BRIEF_SYSTEM), Message("user", "\n\n".join(parts))]
    if reasons_choice(question, style, reason_choices):
        parts.append(f"Question: {question}\n{CHOICE_INSTRUCTION}")
        return [Message("user", "\n\n".join(parts))]
    verdict = style == "instruction_yes_no" and asks_yes_or_no(question)
    parts.append(f"Question: {question}\n{YES_NO_INSTRUCTION if verdict else BRIEF_INSTRUCTION}\nAnswer:")
    return [Message("user", "\n\n".join(parts))]


_LABEL = re.compile(r"^\s*(?:(?:so\s+)?the answer is|final answer|answer|a)\s*:\s*", re.IGNORECASE)
_FIELD = re.compile(r"^[A-Z][\w ]{0,30}:")  # "Question:", "Completed Chain:", "Explanation:" - not an answer
# "Yes, both are ..." - the verdict, then why; not "No. 10 Downing Street", "No-one", "Yes-man"
_VERDICT = re.compile(r"^(yes|no)(?:\s*[,;:!]|\s+[-\u2013]|\.\s+(?!\d))\s*\S", re.IGNORECASE)


def clean_answer(text: str, label: re.Pattern[str] = _LABEL) -> str:
    """The first line of a short answer, without a leading ``label`` ("Answer:", "The answer is:") or trailing
    period. A label alone on the first line leaves the answer to the next line that has text, unless that
    line is a field of its own ("Question: ...", "Explanation: ..."): SmolLM2 often writes "The answer is:",
    a blank line, then the answer. A reply that opens with a verdict and goes on to explain it ("Yes, both
    are American") is the verdict."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    first, labelled = label.subn("", lines[0])
    answer = first.strip().rstrip(".").strip()
    if not answer and labelled and len(lines) > 1 and not _FIELD.match(lines[1]):
        answer = label.sub("", lines[1]).strip().rstrip(".").strip()
    verdict = _VERDICT.match(answer)
    return verdict.group(1) if verdict else answer


# the paper's marker, matched leniently: small models drop the "So"
_MARKER = re.compile(r"(?:so\s+)?the answer is\s*:", re.IGNORECASE)
_EXACT_MARKER = re.compile(r"so\s+the answer is\s*:", re.IGNORECASE)
_PERIOD = re.compile(r"\.(\s|$)")
_ABBREVIATIONS = {"dr", "mr", "mrs", "ms", "st", "jr", "sr", "vs", "no", "mt", "ft", "e.g", "i.e", "etc", "inc", "co"}


def first_sentence(text: str) -> str:
    """The first line, cut after its first sentence unless it carries the answer marker."""
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    if _MARKER.search(line):
        return line
    for match in _PERIOD.finditer(line):
        word = line[: match.start()].rsplit(None, 1)[-1].lower() if line[: match.start()].strip() else ""
        if word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
            continue  # "Dr. Smith", "J. R. R. Tolkien"
        return line[: match.start() + 1]
    return line


def extract_answer(thought: str) -> str | None:
    """The text after the answer marker, or None if the marker is absent (case-insensitive)."""
    match = _MARKER.search(thought)
    return clean_answer(thought[match.end():]) if match else None


def marker_outcome(text: str) -> str:
    """How a reply's answer marker was read: ``parsed`` (the prompt's "So the answer is:"), ``repaired``
    (the lenient "the answer is:"), ``fallback`` (none)."""
    if _EXACT_MARKER.search(text):
        return "parsed"
    return "repaired" if _MARKER.search(text) else "fallback"
