"""R²AG with the embedded SmolLM2 and MiniLM: one training step through the frozen LLM, a checkpoint,
and dev500 questions answered end to end with the vectors injected at the placeholders."""

from __future__ import annotations

import pytest
import torch
from tests.conftest import shared

from tandem.corpus import load_dataset
from tandem.index.encoder import load_encoder
from tandem.index.store import DocStore
from tandem.llm import load_llm
from tandem.methods.r2ag import R2AG
from tandem.methods.r2ag import training as tr
from tandem.methods.r2ag.former import load_r2former
from tandem.methods.r2ag.prompts import parse_answer
from tandem.methods.r2ag.settings import R2AGSettings

pytestmark = pytest.mark.integration


def test_train_one_step_then_answer_dev500(tmp_path):
    ds = load_dataset(shared("hotpotqa/dev500.jsonl"))
    store, encoder = DocStore(ds.passages), load_encoder("minilm")
    llm = load_llm("local")
    lists = tr.build_lists(ds.questions[250:252], store, encoder, k=10)
    assert all(len(x.docs) == 10 and x.labels.sum() == 2 for x in lists)
    config = tr.R2AGTrainConfig(epochs=1, grad_accum=2, doc_words=12, lr=1e-3)
    log = tr.train_r2ag(llm, lists, lists[:1], tmp_path / "ck", config)
    assert log["steps"] == 1 and log["val_after"]["lm"] > 0
    assert all(p.grad is None for p in llm.model.parameters())  # the LLM stayed frozen
    model = load_r2former(tmp_path / "ck")
    assert model.config.llm_hidden == 576 and model.config.placeholder == ""
    method = R2AG(llm, model, encoder, R2AGSettings(docs="context", max_tokens=12), store=store)
    answer = method.answer(ds.questions[0])
    answer_step = answer.trace.steps[-1]
    assert answer_step.notes["placeholder"] == "<reponame>" and len(answer_step.notes["positions"]) == 10
    call = answer_step.llm_calls[0]
    assert call.messages[0]["content"].count("similarity: <reponame>") == 10 and call.completion_tokens >= 1
    assert answer.text == parse_answer(call.output)  # the answer is the recorded reply, parsed
    assert sorted(answer.trace.docs_read) == sorted(ds.questions[0].metadata["context_ids"])
    feats = answer.trace.steps[1].notes["features"]
    with torch.no_grad():  # the trace records the trained relevance head's output for these features
        relevance = torch.sigmoid(model(torch.tensor([[f["r"], f["gamma"], f["zeta"]] for f in feats])[None])[1][0])
    assert torch.allclose(torch.tensor([f["relevance"] for f in feats]), relevance, atol=2e-3)
