"""DualRAG end to end on the embedded models: SmolLM2 (local backend) + a MiniLM dense index over one
dev500 question's own paragraphs, max_iter=2. Checks the loop's shape, not answer quality (135M model)."""

from __future__ import annotations

import pytest
from tests.conftest import shared

from tandem.compose import build_method
from tandem.corpus import load_dataset
from tandem.index import build_index, open_index
from tandem.llm import load_llm
from tandem.methods import Search
from tandem.methods.dualrag import parse as R
from tandem.methods.dualrag import prompts as P
from tandem.render import render_trace
from tandem.retrieve import open_retriever

pytestmark = pytest.mark.integration


def test_dualrag_one_question_on_local_models(tmp_path):
    ds = load_dataset(shared("hotpotqa/dev500.jsonl"))
    question = ds.questions[0]
    by_id = {d.id: d for d in ds.passages}
    docs = [by_id[i] for i in question.metadata["context_ids"]]
    build_index(docs, tmp_path / "idx", kind="dense")
    idx = open_index(tmp_path / "idx")
    search = Search(open_retriever(idx), idx.store)
    method = build_method("dualrag", load_llm("local"), search, max_iter=2, candidates=5, k=3)
    answer = method.answer(question)

    steps = answer.trace.steps
    assert 2 <= len(steps) <= 3 and steps[-1].name == "answer" and answer.text.strip()
    roles = [c.role for c in answer.trace.llm_calls]
    assert roles[0] == "reasoner" and roles[-1] == "answer"
    assert all(c.prompt_tokens > 0 and c.completion_tokens > 0 for c in answer.trace.llm_calls)
    structured = [c for c in answer.trace.llm_calls if c.structured]
    assert structured and all(c.constrained for c in structured)  # decoded under the role schemas
    assert sum(r["fell_back"] for r in answer.trace.protocol().values()) == 0
    first = steps[0].notes
    reasoner = [c for c in steps[0].llm_calls if c.role.startswith("reasoner")]
    # the recorded thought is the Reasoner's (last, usable) reply parsed; greedy: it asks to retrieve every run
    assert R.parse_reasoner(reasoner[-1].output) == (first["thought"], True) and first["thought"]
    # the retrieval step: entities with their keywords, at most k hits each, the outline recorded
    assert first["entities"] and all(len(ids) <= 3 for ids in first["hits"].values())
    assert steps[0].queries and steps[0].hits and answer.trace.docs_read
    assert set(answer.trace.docs_read) <= set(question.metadata["context_ids"])
    kept = [s for s in first["summaries"].values() if s]  # the outline holds every summary kept at this step
    assert all(s.strip() in first["outline"] for s in kept) and (first["outline"] == P.EMPTY) == (not kept)
    assert "answer:" in str(render_trace(answer, idx.store).renderables[-2])
