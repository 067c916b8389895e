"""Answer metrics as the papers compute them (pure functions of one prediction and its gold answers).

- EM / F1: SQuAD normalisation (lower case, drop punctuation, articles a/an/the, extra spaces);
  F1 over tokens; a yes/no/noanswer prediction or gold scores F1 only on an exact match
  (FlashRAG's rule). Both take the max over gold answers.
- cover-acc: a normalised gold answer is contained in the normalised prediction ("acc" in
  FlashRAG and DualRAG's code).
- ROUGE-L: F-measure of the longest common token subsequence, for long-form answers.
- gold-doc recall: the fraction of gold documents among the documents a method read.
The LLM-judge metric lives in ``judge.py``: it needs an LLM.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Collection, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)
SPECIAL = {"yes", "no", "noanswer"}


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower, remove punctuation and articles, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in golds))


def _f1_one(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if (pred in SPECIAL or ref in SPECIAL) and pred != ref:
        return 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    common = Counter(pred_tokens) & Counter(ref_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, golds: Sequence[str]) -> float:
    """Token F1, max over gold answers."""
    return max((_f1_one(prediction, g) for g in golds), default=0.0)


def cover_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 if any normalised gold answer is a substring of the normalised prediction."""
    pred = normalize_answer(prediction)
    return float(any(normalize_answer(g) and normalize_answer(g) in pred for g in golds))


def _lcs(a: Sequence[str], b: Sequence[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b, start=1):
            cur.append(prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1]))
        prev = cur
    return prev[-1]


def rouge_l(prediction: str, golds: Sequence[str]) -> float:
    """ROUGE-L F1 (beta = 1) over normalised tokens, max over gold answers."""
    best = 0.0
    pred = normalize_answer(prediction).split()
    for gold in golds:
        ref = normalize_answer(gold).split()
        lcs = _lcs(pred, ref)
        if lcs:
            p, r = lcs / len(pred), lcs / len(ref)
            best = max(best, 2 * p * r / (p + r))
    return best


def gold_doc_recall(gold_ids: Collection[str], read_ids: Collection[str]) -> float | None:
    """Fraction of gold documents among those the method read (None without gold)."""
    if not gold_ids:
        return None
    return len(set(gold_ids) & set(read_ids)) / len(set(gold_ids))


def answer_scores(prediction: str, golds: Sequence[str]) -> dict[str, float]:
    """EM, F1, cover-acc and ROUGE-L of one prediction."""
    return {
        "em": exact_match(prediction, golds),
        "f1": f1_score(prediction, golds),
        "acc": cover_match(prediction, golds),
        "rouge_l": rouge_l(prediction, golds),
    }
