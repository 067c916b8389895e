"""Metrics that need an LLM: the yes/no LLM judge and the re-answer step (methods.md §3.7).

- Judge (Iter-RetGen's wording as DualRAG uses it): does the prediction imply the ground truth?
  Gold answers may be non-unique, so a close-meaning or containing response counts. Temperature 0;
  asked again (up to ``retries``) until the reply starts with Yes or No; max over gold answers.
- Re-answer: one more call rewrites a long response into a short answer; every metric is then the
  max of the raw and the rewritten answer (DualRAG's evaluation does this for every method except
  direct / native / oracle). Two prompts (``REANSWER_PROMPTS``): ``brief`` (a generic brevity prompt)
  and ``answer_type``, the authors' kind of prompt: it lists the dataset's answer-type distribution
  (:func:`answer_type_notes`; the authors' is in Chinese and its exact text was not available).
- Calibration (:func:`calibrate_judge`): before its column is trusted, the judge is asked about the
  dataset's own gold answers (it should say Yes) and about wrong answers - another question's gold
  answer, and the run's predictions that share no token with any gold answer (it should say No).
  Its accuracy lands in metrics.json; below ``RELIABLE`` the judge column is marked unreliable.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tandem.errors import ConfigError, ParseError
from tandem.eval.qa_metrics import answer_scores, normalize_answer
from tandem.llm.base import LLM, LLMRequest, Message
from tandem.llm.jsonparse import parse_json
from tandem.methods.answers import asks_yes_or_no
from tandem.methods.base import Role, call_structured, compact_json_examples
from tandem.types import Step

JUDGE_PROMPT = compact_json_examples((
    "Question: {question}\nPrediction: {prediction}\nGround-truth: {gold}\n\n"
    "Does the Prediction imply the Ground-truth? Gold answers are not always unique: a response with a "
    "close meaning, or one that contains the ground-truth, counts as implying it. Reply with Yes or No only, "
    'as JSON: {{"verdict": "Yes"}} or {{"verdict": "No"}}.'
))
JUDGE = Role("judge", {"type": "object", "properties": {"verdict": {"enum": ["Yes", "No"]}}, "required": ["verdict"]},
             budget=24, prompt_max_tokens=12)
REANSWER_PROMPT = (
    "Rewrite the response below as the shortest possible answer to the question: an entity, a date, a "
    "number or a short phrase; 'yes' or 'no' for a yes/no question. Reply with the answer only.\n\n"
    "Question: {question}\nResponse: {response}\nShort answer:"
)
ANSWER_TYPE_PROMPT = (
    "Extract the final answer to the question from the response below. In this dataset the answers are "
    "{types}. Reply with the answer alone, in the form such answers take, without explanation.\n\n"
    "Question: {question}\nResponse: {response}\nAnswer:"
)
REANSWER_PROMPTS = {"brief": REANSWER_PROMPT, "answer_type": ANSWER_TYPE_PROMPT}
#: a re-answer prompt: one template, or one per kind of question (True: it asks yes or no,
#: :func:`tandem.methods.answers.asks_yes_or_no`)
ReanswerPrompt = str | Mapping[bool, str]
RELIABLE = 0.8  # calibration accuracy below which the judge column is marked unreliable
_MONTHS = {"january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december"}


def answer_type(answer: str) -> str:
    """A gold answer's type: yes/no, a date, a number, a name (capitalised words) or a phrase."""
    norm = normalize_answer(answer)
    words = norm.split()
    if norm in ("yes", "no"):
        return "yes/no"
    if any(w in _MONTHS for w in words) or (len(words) <= 3 and any(w.isdigit() and len(w) == 4 for w in words)):
        return "a date or year"
    if words and all(w.replace(",", "").replace(".", "").isdigit() for w in words[:1]):
        return "a number"
    if answer[:1].isupper():
        return "a name or title"
    return "a short phrase"


def answer_type_notes(gold_lists: Sequence[Sequence[str]]) -> str:
    """The dataset's answer-type distribution as the prompt lists it, e.g. '62% a name or title, 21% yes/no'."""
    counts = Counter(answer_type(golds[0]) for golds in gold_lists if golds)
    total = sum(counts.values()) or 1
    return ", ".join(f"{round(100 * n / total)}% {kind}" for kind, n in counts.most_common())


def parse_verdict(text: str) -> float:
    """1.0 for Yes, 0.0 for No: the JSON verdict, or a reply that starts with the word."""
    word = text.strip().lower()
    if not word.startswith(("yes", "no")):
        value = parse_json(text, {"type": "object"})
        word = str(value.get("verdict", "")).strip().lower() if isinstance(value, dict) else ""
    if word.startswith("yes"):
        return 1.0
    if word.startswith("no"):
        return 0.0
    raise ParseError("neither Yes nor No", raw=text)


def judge_one(llm: LLM, question: str, prediction: str, gold: str, retries: int = 3, step: Step | None = None) -> float:
    """1.0 if the judge says Yes, 0.0 if No (or if it never says either within ``retries`` asks).
    The verdict is a closed enum, decoded under its schema where the backend can; the calls land in ``step``."""
    prompt = JUDGE_PROMPT.format(question=question, prediction=prediction, gold=gold)
    verdict, _raw = call_structured(llm, step if step is not None else Step("judge"), JUDGE, [Message("user", prompt)],
                                    parse_verdict, attempts=retries, retry="resample", fallback="scored 0")
    return verdict if verdict is not None else 0.0


def judge(llm: LLM, question: str, prediction: str, golds: Sequence[str], step: Step | None = None) -> float:
    """LLM-judge accuracy: max over gold answers (stops at the first Yes)."""
    for gold in golds:
        if judge_one(llm, question, prediction, gold, step=step) == 1.0:
            return 1.0
    return 0.0


def reanswer(llm: LLM, question: str, response: str, prompt: ReanswerPrompt = REANSWER_PROMPT) -> str:
    """The response rewritten as a short answer; ``prompt`` has ``{question}`` and ``{response}`` fields
    (the brevity prompt, or :func:`reanswer_template`'s ``answer_type`` pair, one per kind of question)."""
    if not isinstance(prompt, str):
        prompt = prompt[asks_yes_or_no(question)]
    req = LLMRequest(messages=(Message("user", prompt.format(question=question, response=response)),),
                     max_tokens=32, temperature=0.0)
    return llm.complete(req).text.strip().splitlines()[0].strip() if response.strip() else ""


def best_of(raw: dict[str, float], rewritten: dict[str, float]) -> dict[str, float]:
    """Per metric, the better of the raw and the re-answered prediction."""
    return {k: max(raw[k], rewritten.get(k, 0.0)) for k in raw}


def reanswer_template(kind: str, gold_lists: Sequence[Sequence[str]]) -> ReanswerPrompt:
    """The re-answer prompt ``kind`` (``REANSWER_PROMPTS``) for a dataset with these gold answers.

    ``answer_type`` gives a pair: a question that asks yes or no reads the dataset's whole answer-type
    distribution (the authors' prompt); any other question reads the distribution of the answers that are
    not yes or no, since a small model told "58% yes/no" answers "no" to "Who died first, A or B?"
    (docs/methods/baselines.md, "The paper preset")."""
    if kind not in REANSWER_PROMPTS:
        raise ConfigError(f"unknown re-answer prompt {kind!r}; choose one of {sorted(REANSWER_PROMPTS)}")
    if kind == "answer_type":
        open_ended = [golds for golds in gold_lists if golds and answer_type(golds[0]) != "yes/no"]
        return {asks: ANSWER_TYPE_PROMPT.replace("{types}", answer_type_notes(lists) or "short phrases")
                for asks, lists in ((True, gold_lists), (False, open_ended))}
    return REANSWER_PROMPTS[kind]


def score_prediction(question: str, prediction: str, golds: Sequence[str], *, judge_llm: LLM | None = None,
                     reanswer_llm: LLM | None = None, step: Step | None = None,
                     reanswer_prompt: ReanswerPrompt = REANSWER_PROMPT) -> tuple[dict[str, float], str | None]:
    """All answer metrics of one prediction; returns (scores, rewritten answer or None). Judge calls
    are recorded in ``step`` when given (their protocol health joins the run's)."""
    scores = answer_scores(prediction, golds)
    if judge_llm is not None:
        scores["judge"] = judge(judge_llm, question, prediction, golds, step)
    rewritten = None
    if reanswer_llm is not None:
        rewritten = reanswer(reanswer_llm, question, prediction, reanswer_prompt)
        again = answer_scores(rewritten, golds)
        if judge_llm is not None:
            again["judge"] = judge(judge_llm, question, rewritten, golds, step) if scores["judge"] < 1 else 1.0
        scores = best_of(scores, again)
    return scores, rewritten


def _wrong_gold(golds: Sequence[str], others: Sequence[Sequence[str]], start: int) -> str | None:
    """The first gold answer of ``others`` (from ``start`` on, wrapping) sharing no token with ``golds``."""
    own = {w for g in golds for w in normalize_answer(g).split()}
    for j in range(len(others)):
        candidate = others[(start + j) % len(others)]
        if candidate and not own & set(normalize_answer(candidate[0]).split()):
            return candidate[0]
    return None


def calibration_pairs(items: Sequence[tuple[str, Sequence[str]]], predictions: Sequence[Mapping[str, Any]] = (),
                      limit: int = 100) -> list[tuple[str, str, Sequence[str], bool]]:
    """(question, candidate answer, gold answers, should the judge say Yes) for the first ``limit`` questions:
    each question's own first gold answer (Yes), another question's gold answer that shares no token
    with its golds (No), and each given prediction that shares no token with its golds (No)."""
    items = list(items)[:limit]
    golds_only = [golds for _, golds in items]
    pairs: list[tuple[str, str, Sequence[str], bool]] = []
    for i, (question, golds) in enumerate(items):
        if not golds:
            continue
        pairs.append((question, golds[0], golds, True))
        other = _wrong_gold(golds, golds_only, i + 1 + len(items) // 2)
        if other is not None:
            pairs.append((question, other, golds, False))
    for rec in predictions[:limit]:
        golds, prediction = rec.get("golden_answers") or [], str(rec.get("prediction") or "")
        own = {w for g in golds for w in normalize_answer(g).split()}
        if golds and prediction.strip() and not own & set(normalize_answer(prediction).split()):
            pairs.append((str(rec["question"]), prediction, golds, False))
    return pairs


def calibrate_judge(llm: LLM, items: Sequence[tuple[str, Sequence[str]]],
                    predictions: Sequence[Mapping[str, Any]] = (), *, limit: int = 100,
                    self_judged: bool = False, concurrency: int = 1) -> dict[str, Any]:
    """The judge's accuracy on :func:`calibration_pairs`: ``accuracy`` over all pairs, ``yes_on_gold``
    (should be 1) and ``yes_on_wrong`` (should be 0), and ``reliable`` (accuracy >= ``RELIABLE``).
    ``concurrency`` pairs are judged at a time (a run's own concurrency: up to 300 calls otherwise in turn)."""
    pairs = calibration_pairs(items, predictions, limit)
    step = Step("judge calibration")

    def verdict(pair: tuple[str, str, Sequence[str], bool]) -> tuple[bool, bool]:
        question, answer, golds, yes = pair
        return judge(llm, question, answer, golds, step) == 1.0, yes

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        verdicts = list(pool.map(verdict, pairs))
    gold = [said for said, yes in verdicts if yes]
    wrong = [said for said, yes in verdicts if not yes]
    accuracy = sum(said == yes for said, yes in verdicts) / len(verdicts) if verdicts else 0.0
    return {"pairs": len(verdicts), "gold_pairs": len(gold), "wrong_pairs": len(wrong),
            "yes_on_gold": sum(gold) / len(gold) if gold else None,
            "yes_on_wrong": sum(wrong) / len(wrong) if wrong else None,
            "accuracy": accuracy, "reliable": bool(verdicts) and accuracy >= RELIABLE, "self_judged": self_judged}


def judge_label(metrics: Mapping[str, Any]) -> str | None:
    """The judge column's cell: the score, labelled ``self`` when the generator judged itself and
    ``unreliable`` (with the calibration accuracy) when calibration found it below ``RELIABLE``."""
    if metrics.get("judge") is None:
        return None
    cal = metrics.get("judge_calibration") or {}
    cell = f"{metrics['judge']:.3f}"
    notes = ["self"] if cal.get("self_judged") else []
    if cal and not cal.get("reliable"):
        notes.append(f"unreliable: calibration {cal.get('accuracy', 0.0):.2f}")
    elif not cal:
        notes.append("uncalibrated")
    return cell + (f" ({'; '.join(notes)})" if notes else "")
