"""R²-Former training: the ranked lists' cache, L_LM over the answer positions, the stages it reports."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tandem.index.store import DocStore
from tandem.methods.r2ag import training as tr
from tandem.methods.r2ag.former import R2Former, R2FormerConfig
from tandem.methods.r2ag.train_lists import cached_lists, files_identity, lists_key
from tandem.outdir import MARKER
from tandem.testing.encoders import HashingEncoder
from tandem.types import Document, Question


@pytest.fixture
def docs(small_docs) -> list[Document]:
    return small_docs


def _former(llm) -> R2Former:
    torch.manual_seed(0)
    return R2Former(R2FormerConfig(llm_hidden=32, d_model=16, heads=4, ff=32))


def _questions(docs, n):
    return [Question(f"q{i}", f"Where was Marie Curie born {i}?", ("Warsaw",), gold_doc_ids=("d1", "d3"),
                     metadata={"context_ids": [d.id for d in docs]}) for i in range(n)]


def _lists(docs, n=4):
    return tr.build_lists(_questions(docs, n), DocStore(docs), HashingEncoder(), k=5)


def test_ranked_lists_are_cached_and_a_damaged_cache_is_built_again(docs, tmp_path):
    qs = _questions(docs, 2)
    store = DocStore(docs)
    calls: list[int] = []

    def build():
        calls.append(1)
        return tr.build_lists(qs, store, HashingEncoder(), k=5)

    key = lists_key(dataset="d.jsonl", questions="0:2", k=5)
    first = cached_lists(key, qs, store, build, root=tmp_path)
    again = cached_lists(key, qs, store, build, root=tmp_path)
    assert len(calls) == 1 and [x.qid for x in again] == [x.qid for x in first]
    for a, b in zip(first, again, strict=True):
        assert [d.id for d in a.docs] == [d.id for d in b.docs] and (a.question, a.answer) == (b.question, b.answer)
        assert np.array_equal(a.feats, b.feats) and b.feats.dtype == a.feats.dtype and np.array_equal(a.labels, b.labels)
    path = tmp_path / f"{key}.json.gz"
    good = path.read_bytes()
    for damaged in (b"damaged", good[:20] + bytes(b ^ 0xFF for b in good[20:60]) + good[60:], good[: len(good) // 2]):
        path.write_bytes(damaged)  # not gzip; a gzip header over a corrupt body; cut short: each built again
        cached_lists(key, qs, store, build, root=tmp_path)
    assert len(calls) == 4


def test_the_cache_key_follows_the_files_the_lists_are_made_from(tmp_path):
    index = tmp_path / "index"
    index.mkdir()
    (index / "docs.jsonl").write_text("a")
    (index / MARKER).write_text("1")
    before = lists_key(index=files_identity(index), k=5)
    (index / MARKER).write_text("12")  # the marker (it records the files) is not the index's content
    assert lists_key(index=files_identity(index), k=5) == before
    (index / "docs.jsonl").write_text("b")  # same size, other content
    assert lists_key(index=files_identity(index), k=5) != before
    moved = tmp_path / "elsewhere"
    index.rename(moved)
    (moved / "docs.jsonl").write_text("a")  # the same files at another path, written again (new mtime)
    assert lists_key(index=files_identity(moved), k=5) == before


def test_answer_loss_is_the_full_sequence_loss_on_answer_tokens(tiny_llm, docs):
    """L_LM over the answer tokens, computed from the logits of those positions only, equals the
    transformers loss over the whole sequence with every prompt position masked."""
    model = _former(tiny_llm).eval()
    compute = tr.LossComputer(tiny_llm, model, tr.R2AGTrainConfig())
    ex = _lists(docs, 1)[0]
    ids, positions, target = compute.tokens(ex)
    with torch.no_grad():
        lm, _ = compute(ex)
        vectors, _ = model(torch.from_numpy(ex.feats)[None])
        all_ids = torch.tensor([ids + target])
        embeds = tr.inject(tiny_llm.embed_ids(all_ids)[0], positions, vectors[0])
        labels = all_ids.clone()
        labels[0, : len(ids)] = -100
        full = tiny_llm.forward(inputs_embeds=embeds[None], labels=labels).loss
    assert len(target) >= 2 and lm.item() == pytest.approx(full.item(), rel=1e-5)



def test_training_reports_the_validation_loss_as_a_stage_of_its_progress(tiny_llm, docs, tmp_path):
    seen: list[tuple[str, int, int]] = []

    class OnStep:  # the command line's TrainingProgress: on_step plus stage(label)
        def __call__(self, step, total, loss):
            seen.append(("step", step, total))

        def stage(self, label):
            return lambda done, total: seen.append((label, done, total))

    lists = _lists(docs, 2)
    cfg = tr.R2AGTrainConfig(epochs=1, grad_accum=1, d_model=16, eval_every=2, save_every=100)
    tr.train_r2ag(tiny_llm, lists, lists, tmp_path / "a", cfg, on_step=OnStep())
    assert seen == [("validation loss before", 1, 2), ("validation loss before", 2, 2), ("step", 1, 2),
                    ("step", 2, 2), ("validation loss at step 2", 1, 2), ("validation loss at step 2", 2, 2)]
