"""The training scores on a tiny random BERT (MiniLM's tokenizer, 4 layers of width 32): RaLa's
differentiable logit equals the reranker's score at eval and passes gradients; training runs with it;
|S| and a come from the unrolled sub-questions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tandem.errors import ConfigError
from tandem.index.layers import LayerEncoder
from tandem.index.store import DocStore
from tandem.methods.cooprag.prompts import Unrolled
from tandem.methods.cooprag.train_retriever import (
    TrainConfig,
    alpha_summary,
    difficulty_weight,
    infonce_from_scores,
    train_retriever,
    training_questions,
)
from tandem.model_files import resolve_model
from tandem.rerank.rala import RaLaReranker
from tandem.train.scores import CosineScore, RaLaScore, make_score
from tandem.types import Question

QUERY = "Where was Marie Curie, the physicist, born?"


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory) -> str:
    """A sentence-transformers folder: random 4-layer BERT + mean pooling + normalize."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules.normalize import Normalize
    from sentence_transformers.base.modules.transformer import Transformer
    from sentence_transformers.sentence_transformer.modules.pooling import Pooling
    from transformers import AutoTokenizer, BertConfig, BertModel

    root = tmp_path_factory.mktemp("tiny-encoder")
    tok = AutoTokenizer.from_pretrained(resolve_model("minilm"))
    torch.manual_seed(0)
    bert = BertModel(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                                intermediate_size=64, max_position_embeddings=128))
    bert.save_pretrained(root / "hf")
    tok.save_pretrained(root / "hf")
    model = SentenceTransformer(modules=[Transformer(str(root / "hf"), max_seq_length=64), Pooling(32, "mean"),
                                         Normalize()], device="cpu")
    model.save(str(root / "st"))
    return str(root / "st")


def _model(path: str):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device="cpu")


@pytest.mark.parametrize(("cls", "omega", "layers"), [("mean", True, (2,)), ("cls", True, (0, 1)), ("mean", False, (1,))])
def test_rala_logit_equals_the_rerankers_score_at_eval(tiny_encoder, small_docs, cls, omega, layers):
    model = _model(tiny_encoder).eval()
    score = RaLaScore(model, layers=layers, cls=cls, omega=omega)
    with torch.no_grad():
        train = score.matrix(score.encode([QUERY], documents=False),
                             score.encode([d.contents for d in small_docs], documents=True))[0].numpy()
    reranker = RaLaReranker(LayerEncoder(tiny_encoder), DocStore(small_docs), None, layers=layers, cls=cls,
                            omega=omega, fuse="none")
    served = reranker.scores(QUERY, [d.id for d in small_docs])
    np.testing.assert_allclose(train, served, atol=1e-5)
    assert np.ptp(train) > 0  # documents are told apart, so equality is not trivial


def test_rala_logit_passes_gradients_to_the_encoder_and_temperature(tiny_encoder, small_docs):
    model = _model(tiny_encoder).train()
    score = make_score("rala", model, layers=(1,))
    texts = [d.contents for d in small_docs]
    q = score.encode(["Marie Curie birthplace", "longest river in Poland"], documents=False)
    pos = score.matrix(q, score.encode([texts[0], texts[3]], documents=True))
    neg = score.matrix(q, score.encode([texts[1], texts[4]], documents=True))
    assert pos.shape == neg.shape == (2, 2)
    log_inv_t = torch.nn.Parameter(torch.tensor(math.log(20.0)))
    loss = infonce_from_scores(pos, neg, ["a", "b"], torch.ones(2), log_inv_t, 1.0)
    loss.backward()
    hf = model[0].auto_model
    assert log_inv_t.grad is not None and log_inv_t.grad.abs().item() > 0
    assert hf.embeddings.word_embeddings.weight.grad.abs().sum().item() > 0
    # the gap weight reads hidden state 1, so the layer after it gets gradient from w too
    assert hf.encoder.layer[0].attention.self.query.weight.grad.abs().sum().item() > 0


def test_rala_ignores_padding_and_punctuation_on_the_document_side(tiny_encoder):
    model = _model(tiny_encoder).eval()
    score = RaLaScore(model, layers=(1,))
    with torch.no_grad():
        q = score.encode([QUERY], documents=False)
        alone = score.matrix(q, score.encode(["Warsaw, Poland."], documents=True))
        padded = score.matrix(q, score.encode(["Warsaw, Poland.", "a much longer document " * 8], documents=True))
        d = score.encode(["Warsaw, Poland."], documents=True)
    torch.testing.assert_close(alone[0, 0], padded[0, 0], atol=1e-5, rtol=0)
    assert d.punct.sum().item() == 2 and not (d.punct & ~d.real).any()


def test_make_score_and_cosine(tiny_encoder):
    model = _model(tiny_encoder).eval()
    assert isinstance(make_score("cosine", model), CosineScore)
    with pytest.raises(ConfigError, match="unknown training score"):
        make_score("dot", model)
    with pytest.raises(ConfigError, match="layers"):
        RaLaScore(model, layers=(4,))  # hidden state 4 is the last of this 4-layer model
    cos = CosineScore(model)
    with torch.no_grad():
        e = cos.encode(["a", "b"], documents=False)
        expected = model.encode(["a", "b"], convert_to_tensor=True)
    torch.testing.assert_close(cos.matrix(e, e), expected @ expected.T, atol=1e-5, rtol=0)


def test_training_with_the_rala_score_saves_a_working_encoder(tiny_encoder, small_docs, tmp_path):
    store = DocStore(small_docs)
    qs = [Question("a", "Where was Marie Curie born?", (), ("d1", "d3"), {"context_ids": ["d1", "d2", "d3", "d5"]}),
          Question("b", "Which river is longest in Poland?", (), ("d4",), {"context_ids": ["d4", "d5"]})]
    train = training_questions(qs, store)
    config = TrainConfig(base=tiny_encoder, score="rala", rala_layers=(1,), epochs=2, batch_size=3, max_length=64)
    steps = []
    log = train_retriever(train, [d.contents for d in small_docs], tmp_path / "out", config,
                          lambda s, t, loss: steps.append((s, t, loss)))
    assert log["steps"] == 2 and len(steps) == 2 and all(math.isfinite(x[2]) for x in steps)
    assert log["config"]["score"] == "rala" and log["n_sub_sources"]["default"] == 2
    assert _model(str(tmp_path / "out")).encode(["x"]).shape == (1, 32)


def test_alpha_comes_from_the_unrolled_sub_questions(small_docs):
    store = DocStore(small_docs)
    qs = [Question(i, f"question {i}", (), ("d1",), {"context_ids": ["d1", "d2"]}) for i in "abcd"]
    qs.append(Question("e", "musique question", (), ("d4",), {"decomposition": [{}, {}, {}, {}]}))
    plain = training_questions(qs, store)
    assert {t.n_sub for t in plain if t.id != "e"} == {2}  # HotpotQA without unrollings: |S| = 2 for all
    assert alpha_summary(plain)["n_sub_sources"] == {"unrolled": 0, "decomposition": 1, "default": 4}
    unrolled = {
        "a": Unrolled(("s1",), ()),
        "b": Unrolled(("s1", "s2", "s3"), ()),
        "c": Unrolled((), ()),  # the unrolling fell back: no S
        "e": Unrolled(("s1", "s2"), ()),  # an unrolling wins over the decomposition
    }
    train = {t.id: t for t in training_questions(qs, store, unrollings=unrolled)}
    assert {k: (t.n_sub, t.n_sub_source) for k, t in train.items()} == {
        "a": (1, "unrolled"), "b": (3, "unrolled"), "c": (2, "default"), "d": (2, "default"), "e": (2, "unrolled")}
    summary = alpha_summary(list(train.values()))
    assert summary["n_sub_sources"] == {"unrolled": 3, "decomposition": 0, "default": 2}
    assert summary["alpha_counts"] == {f"{difficulty_weight(1):.3f}": 1, f"{difficulty_weight(2):.3f}": 3,
                                       f"{difficulty_weight(3):.3f}": 1}
