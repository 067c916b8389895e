"""R²AG's documents at inference: cut to the checkpoint's ``doc_words`` unless the run sets its own (0: whole)."""
import torch

from tandem.index.store import DocStore
from tandem.methods.r2ag.algorithm import R2AG
from tandem.methods.r2ag.former import R2Former, R2FormerConfig
from tandem.methods.r2ag.settings import R2AGSettings
from tandem.testing.encoders import HashingEncoder
from tandem.types import Question


def _prompt(tiny_llm, docs, **settings) -> str:
    torch.manual_seed(0)
    former = R2Former(R2FormerConfig(llm_hidden=32, d_model=16, heads=4, ff=32, doc_words=3)).eval()
    method = R2AG(tiny_llm, former, HashingEncoder(), R2AGSettings(docs="context", max_tokens=1, **settings),
                  store=DocStore(docs))
    q = Question("q", "Where was Marie Curie born?", ("Warsaw",), metadata={"context_ids": [d.id for d in docs]})
    return method.answer(q).trace.steps[2].llm_calls[0].messages[0]["content"]


def test_documents_follow_the_checkpoints_cut_unless_the_run_sets_one(tiny_llm, small_docs):
    whole = small_docs[0].text
    cut = _prompt(tiny_llm, small_docs)
    assert "Marie Curie was ..." in cut and whole not in cut  # the checkpoint's 3 words
    assert "Marie Curie was born in Warsaw ..." in _prompt(tiny_llm, small_docs, doc_words=6)
    full = _prompt(tiny_llm, small_docs, doc_words=0)
    assert all(d.text in full for d in small_docs) and " ..." not in full
