"""R²AG on a tiny random Llama: feature formulas on hand-built vectors, placeholder injection (vector i
at placeholder i), gradients reaching R²-Former through a frozen LLM, checkpoints and resume, the
relevance loss and ranking metrics, ablation switches, and backends that cannot take embeddings."""

from __future__ import annotations

import base64
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import torch

from tandem.compose import build_method
from tandem.errors import ConfigError
from tandem.index.store import DocStore
from tandem.llm.base import LLMRequest
from tandem.llm.hf import HFLLM
from tandem.llm.openai_compat import OpenAILLM, encode_prompt_embeds
from tandem.methods import Search
from tandem.methods.r2ag import prompts as P
from tandem.methods.r2ag import training as tr
from tandem.methods.r2ag.algorithm import R2AG, embedding_backend, inject
from tandem.methods.r2ag.former import (
    R2Former,
    R2FormerConfig,
    list_features,
    load_r2former,
    neighbor_similarity,
    precedent_similarity,
    relevance,
    relevance_loss,
    save_checkpoint,
)
from tandem.methods.r2ag.settings import R2AGSettings
from tandem.registry import METHODS
from tandem.testing.encoders import HashingEncoder
from tandem.testing.fake_llm import FakeLLM
from tandem.types import Document, Hit, Question


@pytest.fixture
def docs(small_docs) -> list[Document]:
    return small_docs


def _former(llm: HFLLM, **kw) -> R2Former:
    torch.manual_seed(0)
    return R2Former(R2FormerConfig(llm_hidden=32, d_model=16, heads=4, ff=32, **kw))


# -- features ----------------------------------------------------------------------------------

def test_relevance_is_cosine():
    q = np.array([1.0, 0.0])
    d = np.array([[2.0, 0.0], [1.0, 1.0], [0.0, 3.0]])
    assert np.allclose(relevance(q, d), [1.0, 2 ** -0.5, 0.0])


def test_precedent_similarity_softmax_weighted_prefix_and_first_convention():
    d = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    r = np.array([0.9, 0.5, 0.1])
    w = np.exp(r) / np.exp(r).sum()
    g = precedent_similarity(d, r)
    assert g[0] == 1.0  # gamma_1 = 1: nothing precedes the first document (authors' code)
    assert g[1] == pytest.approx(0.0)  # d2 is orthogonal to d1
    prefix = w[0] * d[0] + w[1] * d[1]
    expected = prefix @ d[2] / (np.linalg.norm(prefix) * np.linalg.norm(d[2]))
    assert g[2] == pytest.approx(expected, abs=1e-6)
    assert precedent_similarity(d, r, first=0.0)[0] == 0.0


def test_neighbor_similarity_edges_and_middle():
    d = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.0, 1.0]])
    c = 2 ** -0.5
    z = neighbor_similarity(d)
    assert np.allclose(z, [c, (c + c) / 2, (c + 1.0) / 2, 1.0])
    assert np.allclose(neighbor_similarity(d[:1]), [1.0])


def test_list_features_order_ablation_and_sorted_check():
    q = np.array([1.0, 0.0])
    d = np.array([[1.0, 0.1], [1.0, 1.0], [0.0, 1.0]])
    f = list_features(q, d)
    assert f.shape == (3, 3) and np.allclose(f[:, 0], relevance(q, d))
    assert np.allclose(f[:, 1], precedent_similarity(d, f[:, 0])) and np.allclose(f[:, 2], neighbor_similarity(d))
    for i, name in enumerate(("r", "gamma", "zeta")):
        dropped = list_features(q, d, drop=[name])
        assert np.all(dropped[:, i] == 0) and np.allclose(np.delete(dropped, i, 1), np.delete(f, i, 1))
    with pytest.raises(ConfigError, match="sorted"):
        list_features(q, d[::-1])
    with pytest.raises(ConfigError, match="unknown features"):
        list_features(q, d, drop=["beta"])


# -- R²-Former, loss, checkpoints ----------------------------------------------------------------

def test_r2former_shapes_and_relevance_bce():
    model = R2Former(R2FormerConfig(llm_hidden=24, d_model=16, ff=32))
    vec, logits = model(torch.rand(2, 5, 3))
    assert vec.shape == (2, 5, 24) and logits.shape == (2, 5)
    labels = torch.tensor([[1.0, 0, 0, 0, 1], [0, 1, 0, 0, 0]])
    manual = -(labels * torch.log(torch.sigmoid(logits)) + (1 - labels) * torch.log(1 - torch.sigmoid(logits))).mean()
    assert relevance_loss(logits, labels).item() == pytest.approx(manual.item(), rel=1e-5)
    with pytest.raises(ConfigError, match="max_k"):
        model(torch.rand(1, 65, 3))


def test_checkpoint_round_trip(tmp_path):
    model = R2Former(R2FormerConfig(llm_hidden=24, d_model=16, ff=32, drop_features=["zeta"], doc_words=30)).eval()
    save_checkpoint(tmp_path / "ck", model)
    again = load_r2former(tmp_path / "ck")
    x = torch.rand(1, 4, 3)
    assert torch.equal(model(x)[0], again(x)[0]) and again.config.drop_features == ["zeta"]
    with pytest.raises(ConfigError, match="not an R²-Former checkpoint"):
        load_r2former(tmp_path)


def test_ranking_metrics():
    assert tr.average_precision([0.9, 0.8, 0.1], [0, 1, 1]) == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert tr.recall_at([0.9, 0.8, 0.1], [0, 1, 1], 2) == 0.5


# -- prompt and injection ------------------------------------------------------------------------

def test_placeholder_choice_and_positions(tiny_llm, docs):
    ph = P.choose_placeholder(tiny_llm.tokenizer, tiny_llm.eos_token_ids)
    assert ph[0] == "<reponame>"  # <|endoftext|> (the unk) is an end id: skipped
    tricky = [Document("x", "T", "text with <reponame> inside"), *docs[:2]]
    prompt = P.build_prompt(tiny_llm.tokenizer, "Who?", tricky, ph)
    assert len(prompt.positions) == 3 and all(prompt.ids[p] == ph[1] for p in prompt.positions)
    assert prompt.text.count("similarity: <reponame>") == 3
    assert prompt.text.index("Question: Who?") > prompt.text.index(docs[1].text)  # question after the documents
    with pytest.raises(ConfigError, match="not in the tokenizer"):
        P.choose_placeholder(tiny_llm.tokenizer, tiny_llm.eos_token_ids, "<nope>")


def test_a_qwen_style_vocabulary_gets_its_vision_padding_token_as_placeholder():
    """Qwen2.5's tokenizer has none of the StarCoder / Llama specials: its unused <|vision_pad|> is taken."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({"hello": 0, "world": 1, "[UNK]": 2}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]")
    tok.add_special_tokens({"additional_special_tokens": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_pad|>"]})
    end = [tok.convert_tokens_to_ids("<|endoftext|>"), tok.convert_tokens_to_ids("<|im_end|>")]
    assert P.choose_placeholder(tok, end) == ("<|vision_pad|>", tok.convert_tokens_to_ids("<|vision_pad|>"))
    assert tok("hello <|vision_pad|> world", add_special_tokens=False)["input_ids"][1] == P.choose_placeholder(tok, end)[1]


def test_injection_lands_vector_i_at_placeholder_i(tiny_llm, docs, monkeypatch):
    model = _former(tiny_llm)
    method = R2AG(tiny_llm, model, HashingEncoder(), R2AGSettings(docs="context", k=5, max_tokens=3), store=DocStore(docs))
    seen = {}
    real = tiny_llm.generate_from_embeds

    def spy(embeds, **kw):
        seen["embeds"] = embeds.clone()
        return real(embeds, **kw)

    monkeypatch.setattr(tiny_llm, "generate_from_embeds", spy)
    q = Question("q", "Where was Marie Curie born?", ("Warsaw",), metadata={"context_ids": [d.id for d in docs]})
    ans = method.answer(q)
    feats = ans.trace.steps[1].notes["features"]
    ranked = [f["doc_id"] for f in feats]
    prompt = P.build_prompt(tiny_llm.tokenizer, q.text, [DocStore(docs).get(d) for d in ranked], method.placeholder)
    base = tiny_llm.embed_ids(torch.tensor([prompt.ids]))[0].detach()
    f = torch.tensor([[x["r"], x["gamma"], x["zeta"]] for x in feats])
    vectors = model(f[None])[0][0].detach()
    got = seen["embeds"][0]
    assert got.shape == base.shape
    for i, pos in enumerate(prompt.positions):
        assert torch.allclose(got[pos], vectors[i], atol=1e-3)  # features were rounded in the trace
        assert not torch.allclose(got[pos], base[pos])
    others = [j for j in range(len(prompt.ids)) if j not in prompt.positions]
    assert torch.equal(got[others], base[others])
    assert [s.name for s in ans.trace.steps] == ["retrieve", "features", "answer"]
    assert ans.trace.steps[2].llm_calls[0].messages[0]["content"].count("<reponame>") == 5
    relevance = torch.sigmoid(model(f[None])[1][0]).detach()  # the relevance head's output is what the trace records
    assert torch.allclose(torch.tensor([x["relevance"] for x in feats]), relevance, atol=2e-3)
    assert sorted(ans.trace.docs_read) == sorted(d.id for d in docs)


def test_inject_checks_counts():
    with pytest.raises(ConfigError, match="placeholders"):
        inject(torch.zeros(5, 4), [1, 2], torch.ones(3, 4))


def test_no_injection_switch_keeps_token_embeddings(tiny_llm, docs, monkeypatch):
    method = R2AG(tiny_llm, _former(tiny_llm), HashingEncoder(), R2AGSettings(docs="context", inject=False, max_tokens=2), store=DocStore(docs))
    seen = {}

    def spy(embeds, **kw):
        seen["embeds"] = embeds
        return FakeLLM("x").complete(LLMRequest.from_prompt("x"))

    monkeypatch.setattr(tiny_llm, "generate_from_embeds", spy)
    q = Question("q", "Who?", ("x",), metadata={"context_ids": [d.id for d in docs]})
    ans = method.answer(q)
    ranked = [DocStore(docs).get(f["doc_id"]) for f in ans.trace.steps[1].notes["features"]]
    prompt = P.build_prompt(tiny_llm.tokenizer, q.text, ranked, method.placeholder)
    assert torch.equal(seen["embeds"][0], tiny_llm.embed_ids(torch.tensor([prompt.ids]))[0])
    assert ans.trace.steps[2].notes["injected"] is False


# -- training ----------------------------------------------------------------------------------

def _questions(docs, n):
    return [Question(f"q{i}", f"Where was Marie Curie born {i}?", ("Warsaw",), gold_doc_ids=("d1", "d3"),
                     metadata={"context_ids": [d.id for d in docs]}) for i in range(n)]


def _lists(docs, n=4):
    return tr.build_lists(_questions(docs, n), DocStore(docs), HashingEncoder(), k=5)


def test_build_lists_labels_gold_and_sorts(docs):
    lists = _lists(docs, 1)
    ex = lists[0]
    assert len(ex.docs) == 5 and ex.labels.sum() == 2
    assert [ex.labels[i] for i, d in enumerate(ex.docs) if d.id in ("d1", "d3")] == [1.0, 1.0]
    assert np.all(np.diff(ex.feats[:, 0]) <= 1e-6)


def test_gradients_reach_r2former_with_llm_frozen(tiny_llm, docs):
    for p in tiny_llm.model.parameters():
        p.requires_grad_(False)
    model = _former(tiny_llm)
    compute = tr.LossComputer(tiny_llm, model, tr.R2AGTrainConfig())
    lm, rel = compute(_lists(docs, 1)[0])
    (lm + rel).backward()
    assert all(p.grad is not None for p in model.parameters())
    assert model.proj.weight.grad.abs().sum() > 0 and model.inp.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in tiny_llm.model.parameters())
    # the LM loss alone also reaches the input layer: only through the injected embeddings
    model.zero_grad()
    compute(_lists(docs, 1)[0])[0].backward()
    assert model.inp.weight.grad.abs().sum() > 0
    assert model.head.weight.grad is None or model.head.weight.grad.abs().sum() == 0


def test_train_checkpoint_resume_matches_uninterrupted_run(tiny_llm, docs, tmp_path):
    lists = _lists(docs, 4)
    cfg = dict(epochs=2, grad_accum=2, d_model=16, lr=1e-2, eval_every=1, save_every=100)
    steps: list[tuple[int, int, float]] = []
    log = tr.train_r2ag(tiny_llm, lists, lists[:1], tmp_path / "a", tr.R2AGTrainConfig(**cfg),
                        on_step=lambda *a: steps.append(a))
    assert log["steps"] == 4 and log["val_before"]["total"] > 0 and len(log["val_history"]) == 4
    assert [(s, t) for s, t, _ in steps] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert all(loss > 0 for _, _, loss in steps)
    tr.train_r2ag(tiny_llm, lists, lists[:1], tmp_path / "b", tr.R2AGTrainConfig(**cfg, max_minutes=0.0))
    assert load_r2former(tmp_path / "b") is not None
    part = tr.load_trainer_state(tmp_path / "b")
    assert part["step"] == 1
    resumed: list[int] = []
    tr.train_r2ag(tiny_llm, lists, lists[:1], tmp_path / "b", tr.R2AGTrainConfig(**cfg),
                  on_step=lambda step, total, loss: resumed.append(step))
    assert resumed == [2, 3, 4]  # counted on from the checkpoint
    a, b = load_r2former(tmp_path / "a"), load_r2former(tmp_path / "b")
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.allclose(x, y, atol=1e-5), name
    with pytest.raises(ConfigError, match="other settings"):
        tr.train_r2ag(tiny_llm, lists, [], tmp_path / "b", tr.R2AGTrainConfig(**{**cfg, "lr": 1.0}))


def test_without_relevance_loss_head_gets_no_update(tiny_llm, docs, tmp_path):
    lists = _lists(docs, 2)
    cfg = tr.R2AGTrainConfig(epochs=1, grad_accum=2, d_model=16, relevance_weight=0.0, drop_features=["gamma"])
    tr.train_r2ag(tiny_llm, lists, [], tmp_path / "c", cfg)
    model = load_r2former(tmp_path / "c")
    assert model.config.drop_features == ["gamma"]
    torch.manual_seed(cfg.seed)
    fresh = R2Former(R2FormerConfig(llm_hidden=32, d_model=16, drop_features=["gamma"],
                                    embed_std=float(tiny_llm.input_embeddings().weight.std())))
    assert torch.equal(model.head.weight, fresh.head.weight)


# -- backends ----------------------------------------------------------------------------------

def test_backend_without_embeddings_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot take"):
        embedding_backend(FakeLLM("x"))
    with pytest.raises(ConfigError, match="enable-prompt-embeds"):
        embedding_backend(OpenAILLM("m", "http://127.0.0.1:9/v1"))
    assert "r2ag" in METHODS and "index" in METHODS.get("r2ag").needs
    with pytest.raises(ConfigError, match="--r2former"):
        build_method("r2ag", FakeLLM("x"), Search(None, DocStore([])))  # type: ignore[arg-type]


def test_hidden_size_mismatch_is_an_error(tiny_llm, docs):
    with pytest.raises(ConfigError, match="projects to 24"):
        R2AG(tiny_llm, R2Former(R2FormerConfig(llm_hidden=24, d_model=16)), HashingEncoder(), R2AGSettings(docs="context"), store=DocStore(docs))


class _EmbedsHandler(BaseHTTPRequestHandler):
    bodies: list = []

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        tensor = torch.load(io.BytesIO(base64.b64decode(body["prompt_embeds"])), weights_only=True)
        _EmbedsHandler.bodies.append((self.path, body, tensor))
        data = json.dumps({"model": body["model"], "choices": [{"index": 0, "text": " Warsaw\nmore", "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": tensor.shape[0], "completion_tokens": 2}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def test_served_prompt_embeds_reach_a_vllm_style_server(tiny_llm, docs, tmp_path):
    t = torch.randn(3, 4)
    assert torch.equal(torch.load(io.BytesIO(base64.b64decode(encode_prompt_embeds(t))), weights_only=True), t)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EmbedsHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        remote = OpenAILLM("tiny", f"http://127.0.0.1:{server.server_address[1]}/v1", max_retries=0)
        backend = embedding_backend(remote, tiny_llm.path)
        assert torch.equal(backend.input_embeddings().weight, tiny_llm.input_embeddings().weight)
        model = _former(tiny_llm)
        ans = R2AG(backend, model, HashingEncoder(), R2AGSettings(docs="context", max_tokens=4), store=DocStore(docs)).answer(
            Question("q", "Where was Marie Curie born?", ("Warsaw",), metadata={"context_ids": [d.id for d in docs]}))
    finally:
        server.shutdown()
    path, body, tensor = _EmbedsHandler.bodies[-1]
    assert path == "/v1/completions" and body["max_tokens"] == 4 and body["temperature"] == 0.0
    assert ans.text == "Warsaw" and tensor.shape[1] == 32
    ph = P.choose_placeholder(tiny_llm.tokenizer, tiny_llm.eos_token_ids)[1]
    assert not any(torch.equal(r, tiny_llm.embed_ids(torch.tensor([[ph]]))[0, 0]) for r in tensor)


def test_search_hits_are_used_with_docs_retrieve(tiny_llm, docs):
    class Fixed:
        name = "fixed"

        def search(self, query, k=10):
            return [Hit(d.id, 1.0, i + 1, "fixed") for i, d in enumerate(docs[:k])]

    method = R2AG(tiny_llm, _former(tiny_llm), HashingEncoder(), R2AGSettings(k=3, max_tokens=2), search=Search(Fixed(), DocStore(docs)))
    ans = method.answer(Question("q", "Where was Marie Curie born?"))
    assert [h.doc_id for h in ans.trace.steps[0].hits] == ["d1", "d2", "d3"]
    assert len(ans.trace.steps[1].notes["features"]) == 3


def test_lora_option_trains_adapters_and_merges_at_inference(tiny_llm, docs, tmp_path):
    from tandem.methods.r2ag.algorithm import apply_lora

    llm = HFLLM(tiny_llm.path, num_threads=1)  # a private copy: LoRA wraps its model
    base_q = llm.model.model.layers[0].self_attn.q_proj.weight.detach().clone()
    cfg = tr.R2AGTrainConfig(epochs=1, grad_accum=2, d_model=16, lr=1e-2, lora_r=2, lora_alpha=4)
    tr.train_r2ag(llm, _lists(docs, 2), [], tmp_path / "ck", cfg)
    assert (tmp_path / "ck" / "lora" / "adapter_model.safetensors").is_file()
    trained = [n for n, p in llm.model.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in n for n in trained)
    fresh = HFLLM(tiny_llm.path, num_threads=1)
    apply_lora(fresh, tmp_path / "ck" / "lora")
    merged_q = fresh.model.model.layers[0].self_attn.q_proj.weight
    assert not torch.allclose(merged_q, base_q) and not hasattr(fresh.model, "peft_config")


def test_scaled_projection_starts_at_the_placeholder_embedding(tiny_llm, docs, tmp_path):
    cfg = tr.R2AGTrainConfig(epochs=1, grad_accum=2, d_model=16, projection="scaled", max_steps=1, lr=1e-3)
    tr.train_r2ag(tiny_llm, _lists(docs, 2), [], tmp_path / "s", cfg)
    model = load_r2former(tmp_path / "s")
    assert model.config.projection == "scaled"
    ph = P.choose_placeholder(tiny_llm.tokenizer, tiny_llm.eos_token_ids)[1]
    target = tiny_llm.embed_ids(torch.tensor([[ph]]))[0, 0].detach()
    vectors = model(torch.from_numpy(_lists(docs, 1)[0].feats)[None])[0][0].detach()
    assert torch.all((vectors - target).norm(dim=-1) < 0.3 * target.norm())  # near the token, not equal to it
    assert not torch.allclose(vectors[0], vectors[1])
    with pytest.raises(ConfigError, match="projection"):
        R2FormerConfig(llm_hidden=4, projection="mlp")


@pytest.mark.parametrize("projection", ["linear", "scaled"])
def test_projection_starts_at_the_token_embeddings_scale(projection):
    """linear: weights N(0, (embed_std/sqrt(d))^2) put the vectors at the embeddings' std; scaled: the same
    factor outside the weights, N(0, 0.1^2) inside, so vectors start at 0.1 x that std around start_at's point."""
    torch.manual_seed(0)
    embed_std = 0.136
    model = R2Former(R2FormerConfig(llm_hidden=512, d_model=256, embed_std=embed_std, projection=projection)).eval()
    feats = torch.rand(8, 10, 3)
    with torch.no_grad():
        vectors, _ = model(feats)
    expected = embed_std if projection == "linear" else 0.1 * embed_std
    assert vectors.std().item() == pytest.approx(expected, rel=0.15)
    anchor = torch.full((512,), 0.5)
    model.start_at(anchor)
    with torch.no_grad():
        moved, _ = model(feats)
    assert (moved - vectors).mean(dim=(0, 1)).allclose(anchor, atol=1e-4)
