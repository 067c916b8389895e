"""Questions that offer a choice between two named things ("Who was born first, Emma Bull or Virginia
Woolf?"): the two options read from the question (:func:`parse_choice`), a reply that opens with one of them
read as that option (:func:`option_answer`, NativeRAG's reader), and the question asked in both orders
(``choice_orders="both"``, off by default): small models name the option written first more often than the
data warrants (the 1.5B: 39 of 54 such answers on dev500 250-374), so the answer prompt is asked as written
and with the two options swapped, and the option whose first tokens the model makes likelier, summed over
the two orders, is the answer - the permutation that cancels a position's pull. It evens the picks but did
not answer better; ``choice_orders="unnamed"`` asks the two orders only where the reply names neither option
(docs/methods/baselines-measured.md, "Choice questions")."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tandem.llm.base import Message
from tandem.methods.answers import MARGIN_CLIP, ask_first_tokens, models_own, token_mass
from tandem.methods.base import mark_exchange
from tandem.types import Step

#: the likeliest first tokens asked for in each order (both options' first tokens are usually among them)
CHOICE_TOKENS = 8

_OR = re.compile(r"\s+or\s+", re.IGNORECASE)
# what ends the question's lead-in before the options ("Who was born first, A or B?", "... earlier--A or B?")
_BEFORE = re.compile(r"(?:[,:;?]|--|\u2014|\s\u2013)\s*")  # an en dash only spaced: "Trenton\u2013Mercer" is a name
_AFTER = re.compile(r"\s*(?:[,;?]|--|\u2014)")
_WORD = re.compile(r"\S+")
# lower-case words that belong inside a name ("Mahbub ul Haq", "Letters to Cleo", "Selle v. Gibb")
_PARTICLES = {"of", "the", "and", "&", "to", "de", "du", "da", "di", "del", "la", "le", "von", "van", "der", "den",
              "al", "ul", "ibn", "bin", "y", "v.", "vs.", "v", "vs", "a", "an", "in", "on"}


@dataclass(frozen=True)
class Choice:
    """The two options of a choice question and where each stands in it (character offsets)."""

    question: str
    first: tuple[int, int]
    second: tuple[int, int]

    @property
    def options(self) -> tuple[str, str]:
        """The two options as the question writes them."""
        return self.question[slice(*self.first)], self.question[slice(*self.second)]

    def swapped(self) -> str:
        """The question with its two options in each other's place."""
        (a0, a1), (b0, b1) = self.first, self.second
        q = self.question
        return q[:a0] + q[b0:b1] + q[a1:b0] + q[a0:a1] + q[b1:]


# the words a question opens with, which are not part of an option ("Is Gasherbrum II or Nuptse ...")
_OPENERS = {"who", "whom", "whose", "which", "what", "when", "where", "why", "how", "is", "are", "was", "were", "do",
            "does", "did", "can", "could", "has", "have", "had", "will", "would", "should", "shall", "may", "might"}


def _named(word: str) -> bool:
    word = word.lstrip("\"'\u201c\u2018(")
    return word[:1].isupper() or word[:1].isdigit() or word.lower() in _PARTICLES


def _run(words: list[re.Match[str]]) -> tuple[int, int] | None:
    """The span of the words that make a name, read outwards from the "or" (``words`` in that order), without
    lower-case particles at either end ("Is the Marsilea or the Brabejum ...": Marsilea, Brabejum)."""
    taken = []
    for word in words:
        if not _named(word.group()):
            break
        taken.append(word)
    while taken and taken[-1].group() in _PARTICLES:
        taken.pop()
    while taken and taken[0].group() in _PARTICLES:
        taken.pop(0)
    if not taken:
        return None
    spans = [w.span() for w in taken]
    start, end = min(s for s, _ in spans), max(e for _, e in spans)
    return start, end


def parse_choice(question: str) -> Choice | None:
    """The two options of ``question`` where it offers a choice with one "or": after the lead-in's comma,
    colon or dash up to the next comma or the question mark ("Which band, Letters to Cleo or Screaming Trees,
    had more members?"), or, where the options stand inside the sentence ("Is Gasherbrum II or Nuptse closer to
    Everest?"), the names (capitalised words and the particles between them) on either side of the "or".
    None for a question with no "or", more than one, or no name on a side."""
    question = question.rstrip()
    found = list(_OR.finditer(question))
    if len(found) != 1:
        return None
    or_start, or_end = found[0].span()
    lead = list(_BEFORE.finditer(question, 0, or_start))
    first: tuple[int, int] | None = None
    if lead:  # the options close the question
        commas = [m for m in lead if m.group().startswith(",")]
        last = lead[-1]  # a colon after a comma is a title's ("Which film, LaLee's Kin: The Legacy of ...")
        a0 = (commas[-1] if last.group().startswith(":") and commas else last).end()
        tail = _AFTER.search(question, or_end)
        b1 = tail.start() if tail else len(question.rstrip(".!"))
        first, second = (a0, or_start), (or_end, b1)
        opening = question[a0:or_start].split()[:1]
        if opening and opening[0].lower() in _OPENERS:  # "In 2001, was Emma Bull or ...": inside the sentence
            first = None
    if first is None:
        words = list(_WORD.finditer(question))
        opener = words[:1] if words and words[0].group().lower().strip("\"'") in _OPENERS else []
        before = [w for w in words[len(opener):] if w.end() <= or_start][::-1]
        after = [w for w in words if w.start() >= or_end]
        first, second = _run(before), _run(after)
        if first is None or second is None:
            return None
        second = (second[0], second[0] + len(question[second[0]:second[1]].rstrip("?.!,:;")))
    a, b = question[slice(*first)].strip(), question[slice(*second)].strip()
    if not a or not b or a.lower() == b.lower() or len(a.split()) > 10 or len(b.split()) > 10:
        return None
    return Choice(question, first, second)


def option_answer(choice: Choice | None, answer: str) -> str:
    """``answer`` cut to the option of ``choice`` (the question's, :func:`parse_choice`) it opens with, where the
    reply goes on past the option ("Icehouse pieces was released in 1987" -> "Icehouse pieces"); else
    ``answer`` as it is (also for no choice). On dev500 250-499 it changes 6 of NativeRAG's 250 answers, 4
    better and none worse (docs/methods/baselines-measured.md, "Choice questions")."""
    if choice is None:
        return answer
    reply = answer.strip()
    forms = []
    for option in choice.options:
        bare = option[4:] if option.lower().startswith("the ") else option
        forms += [(form, option) for form in (option, bare, f"the {bare}")]
    for form, option in sorted(forms, key=lambda pair: -len(pair[0])):  # "Emma Bull ..." is not "Emma"'s
        if reply.lower().startswith(form.lower()) and reply[len(form):len(form) + 1] in (" ", ",", ";", ":"):
            return option
    return answer


def _starts(option: str, token: str) -> bool:
    text, name = token.strip().lower(), option.lower()
    return bool(text) and (name.startswith(text) or (name.startswith("the ") and name[4:].startswith(text)))


def option_logprobs(first_tokens: Sequence[tuple[str, float]], options: tuple[str, str]) -> tuple[float, float] | None:
    """Each option's log-probability of opening the reply, from the reply's likeliest first tokens: the mass of
    the tokens that begin it and not the other; an option none of them begins gets the least likely token's
    log-probability (what any one token outside the list has at most). Clipped to -:data:`MARGIN_CLIP`; None
    where neither option is begun."""
    masses = [token_mass(first_tokens, lambda token, o=option, x=other: _starts(o, token) and not _starts(x, token))
              for option, other in (options, options[::-1])]
    if not any(masses):
        return None
    floor = min(lp for _, lp in first_tokens)
    return tuple(max(-MARGIN_CLIP, math.log(m) if m else floor) for m in masses)  # type: ignore[return-value]


def choice_orders(llm: Any, setting: str) -> str:
    """How a choice question is asked: ``setting`` (``"asked"``, ``"both"``, ``"unnamed"``), or ``"model"`` for
    the model's own (a ``choice_orders`` attribute, set by the local backend from its ladder entry; none:
    ``"asked"``)."""
    value = models_own(llm, "choice_orders", setting)
    return value if value in ("both", "unnamed") else "asked"


def names_an_option(choice: Choice, answer: str) -> bool:
    """Whether ``answer`` names one of ``choice``'s options: either holds the other as whole words, case aside
    ("Franki Valli singing with The Four Seasons", "Conan Doyle"; not "no" for "Arnold Palmer")."""
    said = " ".join(re.findall(r"\w+", answer.lower()))
    names = [" ".join(re.findall(r"\w+", option.lower())) for option in choice.options]
    return bool(said) and any(f" {name} " in f" {said} " or f" {said} " in f" {name} " for name in names if name)


def choose_by_both_orders(llm: Any, step: Step, choice: Choice, messages_for: Callable[[str], Sequence[Message]],
                          mark: bool = True) -> tuple[str | None, str]:
    """The option of ``choice`` the model prefers once the position is cancelled: the answer prompt
    (``messages_for(question)``) asked as written and swapped, :data:`CHOICE_TOKENS` first tokens each, the
    options' log-probabilities (:func:`option_logprobs`) summed over the two orders; noted in
    ``step.notes["choice"]``. Returns (option, "") or (None, why): an LLM that cannot tell its first tokens,
    options where one's first word begins the other's, an order whose tokens begin neither, or a tie - the caller then
    asks for a reply and marks it as the answer role's fallback. ``mark``: mark the last call ``parsed`` (off
    where these calls only check a reply already read)."""
    options = choice.options
    if _starts(options[0], options[1].split()[0]) or _starts(options[1], options[0].split()[0]):
        return None, "one option's first word begins the other's"
    totals = [0.0, 0.0]
    for question in (choice.question, choice.swapped()):
        tokens, why = ask_first_tokens(llm, step, messages_for(question), CHOICE_TOKENS)
        if tokens is None:
            return None, why
        scored = option_logprobs(tokens, options)
        if scored is None:  # one order alone would keep the very pull the two cancel
            return None, f"neither option among the {CHOICE_TOKENS} likeliest first tokens of one order"
        totals = [total + value for total, value in zip(totals, scored, strict=True)]
    step.notes["choice"] = {"options": list(options), "logprobs": [round(t, 3) for t in totals]}
    if totals[0] == totals[1]:
        return None, "both options equally likely"
    if mark:
        mark_exchange(step, "answer", "parsed")
    return options[0 if totals[0] > totals[1] else 1], ""
