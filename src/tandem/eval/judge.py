"""Metrics that need an LLM: the yes/no LLM judge and the re-answer step (methods.md §3.7).

- Judge (Iter-RetGen's wording as DualRAG uses it): does the prediction imply the ground truth?
  Gold answers may be non-unique, so a close-meaning or containing response counts. Temperature 0;
  asked again (up to ``retries``) until the reply starts with Yes or No; max over gold answers.
- Re-answer: one more call rewrites a long response into a short answer; every metric is then the
  max of the raw and the rewritten answer (DualRAG's evaluation does this for every method except
  direct / native / oracle).
"""

from __future__ import annotations

from collections.abc import Sequence

from tandem.errors import ParseError
from tandem.eval.qa_metrics import answer_scores
from tandem.llm.jsonparse import parse_json
from tandem.llm.types import LLM, LLMRequest, Message
from tandem.methods.base import Role, call_structured
from tandem.types import Step

JUDGE_PROMPT = (
    "Question: {question}\nPrediction: {prediction}\nGround-truth: {gold}\n\n"
    "Does the Prediction imply the Ground-truth? Gold answers are not always unique: a response with a "
    "close meaning, or one that contains the ground-truth, counts as implying it. Reply with Yes or No only, "
    'as JSON: {{"verdict": "Yes"}} or {{"verdict": "No"}}.'
)
JUDGE = Role("judge", {"type": "object", "properties": {"verdict": {"enum": ["Yes", "No"]}}, "required": ["verdict"]},
             budget=24, prompt_max_tokens=12)
REANSWER_PROMPT = (
    "Rewrite the response below as the shortest possible answer to the question: an entity, a date, a "
    "number or a short phrase; 'yes' or 'no' for a yes/no question. Reply with the answer only.\n\n"
    "Question: {question}\nResponse: {response}\nShort answer:"
)


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


def reanswer(llm: LLM, question: str, response: str) -> str:
    """The response rewritten as a short answer."""
    req = LLMRequest(messages=(Message("user", REANSWER_PROMPT.format(question=question, response=response)),),
                     max_tokens=32, temperature=0.0)
    return llm.complete(req).text.strip().splitlines()[0].strip() if response.strip() else ""


def best_of(raw: dict[str, float], rewritten: dict[str, float]) -> dict[str, float]:
    """Per metric, the better of the raw and the re-answered prediction."""
    return {k: max(raw[k], rewritten.get(k, 0.0)) for k in raw}


def score_prediction(question: str, prediction: str, golds: Sequence[str], *, judge_llm: LLM | None = None,
                     reanswer_llm: LLM | None = None, step: Step | None = None) -> tuple[dict[str, float], str | None]:
    """All answer metrics of one prediction; returns (scores, rewritten answer or None). Judge calls
    are recorded in ``step`` when given (their protocol health joins the run's)."""
    scores = answer_scores(prediction, golds)
    if judge_llm is not None:
        scores["judge"] = judge(judge_llm, question, prediction, golds, step)
    rewritten = None
    if reanswer_llm is not None:
        rewritten = reanswer(reanswer_llm, question, prediction)
        again = answer_scores(rewritten, golds)
        if judge_llm is not None:
            again["judge"] = judge(judge_llm, question, rewritten, golds, step) if scores["judge"] < 1 else 1.0
        scores = best_of(scores, again)
    return scores, rewritten
