"""Retriever fine-tuning pieces without a model: training data, hard negatives, the weighted InfoNCE."""

from __future__ import annotations

import math
import random

import pytest
import torch

from tandem.index.store import DocStore
from tandem.methods.cooprag.prompts import Unrolled
from tandem.methods.cooprag.train_retriever import (
    difficulty_weight,
    epoch_instances,
    infonce_loss,
    training_questions,
)
from tandem.types import Question


def test_difficulty_weight():
    assert difficulty_weight(2) == pytest.approx(math.log(3))
    assert difficulty_weight(0) == 0.0


def test_training_questions_and_hard_negatives(small_docs):
    store = DocStore(small_docs)
    qs = [
        Question("a", "Where was Marie Curie born?", ("Warsaw",), ("d1", "d3"), {"context_ids": ["d1", "d2", "d3", "d4"]}),
        Question("b", "Which river?", (), ("d4",), {"decomposition": [{}, {}, {}]}),
        Question("c", "No gold here", (), ("zz",)),
    ]
    unrolled = {"a": Unrolled(("Who is Marie Curie?",), (("Marie Curie", "born in", "<FILL>"),))}
    train = training_questions(qs, store, unrollings=unrolled)
    assert [t.id for t in train] == ["a", "b"]
    assert train[0].query == "Where was Marie Curie born? Who is Marie Curie? Marie Curie born in"
    assert train[0].n_sub == 1 and train[1].n_sub == 3 and train[1].query == "Which river?"
    assert len(train[0].positives) == 2 and len(train[0].negatives) == 2 and train[1].negatives == ()
    pool = [d.contents for d in small_docs]
    inst = epoch_instances(train, pool, random.Random(0))
    assert len(inst) == 3
    own = {d.contents for d in small_docs if d.id in ("d2", "d4")}
    assert all(x.negative in own for x in inst if x.qid == "a")
    # "b" has no hard negatives: a random pool passage, never its own gold passage, and not always the same
    b_negatives = [x.negative for seed in range(40) for x in epoch_instances(train, pool, random.Random(seed)) if x.qid == "b"]
    assert train[1].positives[0] not in b_negatives and len(set(b_negatives)) >= 3


def _unit(rows):
    return torch.nn.functional.normalize(torch.tensor(rows, dtype=torch.float32), dim=-1)


def test_infonce_masks_same_question_golds_and_weights_by_alpha():
    q = _unit([[1, 0], [1, 0]])
    pos = _unit([[1, 0], [1, 0]])
    neg = _unit([[0, 1], [0, 1]])
    log_inv_t = torch.nn.Parameter(torch.tensor(math.log(20.0)))
    ones = torch.ones(2)
    same = infonce_loss(q, pos, neg, ["a", "a"], ones, log_inv_t, 0.0)
    other = infonce_loss(q, pos, neg, ["a", "b"], ones, log_inv_t, 0.0)
    assert same.item() < 1e-6  # the other gold of the same question is not a negative
    assert other.item() == pytest.approx(math.log(2), abs=1e-3)  # an identical in-batch negative halves p
    assert infonce_loss(q, pos, neg, ["a", "b"], torch.zeros(2), log_inv_t, 0.0).item() == 0.0
    both = infonce_loss(q, pos, neg, ["a", "b"], ones, log_inv_t, 1.0)
    assert both.item() == pytest.approx(2 * math.log(2), abs=1e-3)  # + the document -> query term
    both.backward()
    assert log_inv_t.grad is not None


def test_infonce_prefers_the_positive():
    q = _unit([[1, 0.1], [0.1, 1]])
    good = infonce_loss(q, _unit([[1, 0], [0, 1]]), _unit([[0, 1], [1, 0]]), ["a", "b"], torch.ones(2),
                        torch.tensor(math.log(20.0)), 1.0)
    bad = infonce_loss(q, _unit([[0, 1], [1, 0]]), _unit([[1, 0], [0, 1]]), ["a", "b"], torch.ones(2),
                       torch.tensor(math.log(20.0)), 1.0)
    assert float(good) < float(bad)
