"""CoRAG pieces without the real models: CRAB splits and stores, FedAvg, the PD loss, parameters, the loop."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch

from tandem.errors import ConfigError, DataError
from tandem.eval.qa_metrics import exact_match
from tandem.federated.bench import (
    COMPOSITIONS,
    ClientSplit,
    Labels,
    Stores,
    check_bench,
    contains_answer,
    label_passages,
    make_stores,
    split_clients,
)
from tandem.federated.fedavg import fedavg
from tandem.federated.local_training import TrainSettings, evaluate, train_local
from tandem.federated.model import CoRAGModel, ModelConfig, clean_answer, perplexity_distillation_loss
from tandem.federated.spec import RunSpec
from tandem.testing.encoders import HashingEncoder
from tandem.types import Document, Question

# --- a synthetic QA set with gold passages ------------------------------------------------------

def _dataset(n_q: int = 60, n_bg: int = 200) -> tuple[list[Question], list[Document]]:
    rng = random.Random(1)
    words = [f"w{i}" for i in range(400)]
    questions, pool = [], []
    for i in range(n_q):
        gold = Document(f"g{i}", f"Topic {i}", f"topic{i} fact says the answer is ans{i} " + " ".join(rng.sample(words, 8)))
        pool.append(gold)
        questions.append(Question(f"q{i}", f"what is the topic{i} fact", (f"ans{i}",), (gold.id,)))
    pool += [Document(f"b{j}", f"Bg {j}", " ".join(rng.sample(words, 12))) for j in range(n_bg)]
    return questions, pool


@pytest.fixture(scope="module")
def bench():
    questions, pool = _dataset()
    labels = label_passages(questions, pool)
    splits = split_clients(questions, labels, clients=4, shots=4, dev=2, test=3, seed=0)
    stores = make_stores(splits, labels, [d.id for d in pool], train_frac=0.8, test_frac=0.05, split_frac=0.2)
    return questions, pool, labels, splits, stores


def test_contains_answer_whole_words():
    assert contains_answer("Born in 1901 in Lennep.", ["1901"])
    assert not contains_answer("Born in 19012.", ["1901"])
    assert contains_answer("The Beatles played", ["the beatles"])
    assert not contains_answer("anything", [""])


def test_labels_relevant_and_hard_negatives(bench):
    questions, pool, labels, _, _ = bench
    for q in questions:
        lab = labels[q.id]
        assert lab.relevant[0] == q.gold_doc_ids[0]  # gold first
        assert not set(lab.relevant) & set(lab.hard_negatives)
        assert len(lab.hard_negatives) <= 45  # ranks 6..50


def test_k_shot_and_split_sizes(bench):
    _, _, _, splits, _ = bench
    assert len(splits) == 4
    assert all(len(s.train) == 4 and len(s.dev) == 2 and len(s.test) == 3 for s in splits)
    ids = [q.id for s in splits for q in s.train + s.dev + s.test]
    assert len(ids) == len(set(ids))


def test_no_test_passage_in_any_training_store(bench):
    _, _, _, _, stores = bench
    train_names = {s for assigned in stores.variants.values() for s in assigned} | set(stores.central.values())
    for test_name in stores.test:
        for name in train_names:
            assert not set(stores.stores[test_name]) & set(stores.stores[name]), (test_name, name)


def test_test_stores_hold_their_relevant_passages_and_background(bench):
    _, _, labels, splits, stores = bench
    for s in splits:
        held = set(stores.stores[stores.test[s.client]])
        rel = {p for q in s.dev + s.test for p in labels[q.id].relevant}
        assert rel <= held and len(held) > len(rel)


def test_rel1_gives_all_relevant_passages_to_one_client(bench):
    _, _, labels, splits, stores = bench
    all_rel = {p for s in splits for q in s.train for p in labels[q.id].relevant}
    rel1 = stores.variants["REL-1"]
    assert all_rel <= set(stores.stores[rel1[0]])
    assert all(not all_rel & set(stores.stores[name]) for name in rel1[1:])


def test_rel_shared_irr_without_relevant(bench):
    _, _, labels, splits, stores = bench
    all_rel = {p for s in splits for q in s.train for p in labels[q.id].relevant}
    assert len(set(stores.variants["REL"])) == 1 and all_rel <= set(stores.stores["rel"])
    assert not all_rel & set(stores.stores["irr"])
    assert set(stores.stores["rel"]) == set(stores.stores["irr"]) | all_rel


def test_split_keeps_each_clients_own(bench):
    _, _, labels, splits, stores = bench
    names = stores.variants["SPLIT"]
    assert len(set(names)) == len(splits)
    for s in splits:
        own = {p for q in s.train for p in labels[q.id].relevant}
        others = {p for t in splits if t is not s for q in t.train for p in labels[q.id].relevant} - own
        store = set(stores.stores[names[s.client]])
        assert own <= store and not others & store
    backgrounds = [set(stores.stores[n]) - {p for q in splits[i].train for p in labels[q.id].relevant}
                   for i, n in enumerate(names)]
    assert all(not backgrounds[i] & backgrounds[j] for i in range(4) for j in range(i + 1, 4))
    assert stores.central["SPLIT"] == "rel"  # 4 slices x 20% of the background = all of B_tr: the union is REL


def test_table2_compositions_hold_what_their_names_say(bench):
    """The paper's Table 2 stores: relevant only, hard negatives + irrelevant, relevant + hard negatives,
    relevant + irrelevant, top-1 relevant + irrelevant - each shared by every client."""
    _, _, labels, splits, stores = bench
    all_rel = {p for s in splits for q in s.train for p in labels[q.id].relevant}
    hard = {p for s in splits for q in s.train for p in labels[q.id].hard_negatives} - all_rel
    b_train = set(stores.stores["irr"])
    store = {v: set(stores.stores[stores.variants[v][0]]) for v in COMPOSITIONS}
    assert all(len(set(stores.variants[v])) == 1 and stores.central[v] == stores.variants[v][0] for v in COMPOSITIONS)
    assert hard & b_train and b_train - hard  # the synthetic pool has both kinds of background
    assert store["REL-ONLY"] == all_rel and store["HN+IRR"] == b_train
    assert store["REL+HN"] == all_rel | (hard & b_train)
    assert store["REL+IRR"] == all_rel | (b_train - hard)
    top1 = {labels[q.id].relevant[0] for s in splits for q in s.train}
    assert store["TOP1+IRR"] == top1 | (b_train - hard)
    broken = type(stores)({**stores.stores, "rel+irr": stores.stores["rel+irr"] + sorted(hard & b_train)[:1]},
                          stores.variants, stores.central, stores.test)
    with pytest.raises(DataError, match="REL\\+IRR must hold every relevant passage and no hard negative"):
        check_bench(splits, labels, broken)


def test_check_bench_catches_a_leak(bench):
    _, _, labels, splits, stores = bench
    assert check_bench(splits, labels, stores)["rel"] == len(stores.stores["rel"])
    leaked = type(stores)({**stores.stores, "rel": stores.stores["rel"] + [stores.stores["test-0"][0]]},
                          stores.variants, stores.central, stores.test)
    with pytest.raises(DataError, match="test store of client 0"):
        check_bench(splits, labels, leaked)


def test_split_errors_name_the_problem():
    questions, pool = _dataset(10, 20)
    labels = label_passages(questions, pool)
    with pytest.raises(DataError, match="usable questions"):
        split_clients(questions, labels, clients=4, shots=4, dev=0, test=1)
    with pytest.raises(ConfigError, match="do not fit"):
        make_stores([ClientSplit(0), ClientSplit(1)], labels, [d.id for d in pool], train_frac=0.9, test_frac=0.5)
    with pytest.raises(ConfigError, match="SPLIT slices"):
        make_stores([ClientSplit(0), ClientSplit(1)], labels, [d.id for d in pool], train_frac=0.5, test_frac=0.1,
                    split_frac=0.3)


def test_bench_folder_round_trip(tmp_path):
    from tandem.federated.bench_io import Bench, build_bench, splits_from
    from tandem.io import write_jsonl_atomic

    questions, pool = _dataset(40, 120)
    by_id = {d.id: d for d in pool}
    recs = [{"question": q.text, "answers": list(q.answers),
             "ctxs": [{"title": by_id[q.gold_doc_ids[0]].title, "text": by_id[q.gold_doc_ids[0]].text, "isgold": True},
                      {"title": pool[40 + i].title, "text": pool[40 + i].text, "isgold": False},
                      {"title": pool[80 + i].title, "text": pool[80 + i].text, "isgold": False}]}
            for i, q in enumerate(questions)]
    write_jsonl_atomic(tmp_path / "nq.jsonl", recs)
    manifest = build_bench(tmp_path / "nq.jsonl", tmp_path / "bench", clients=2, shots=(2, 4), dev=1, test=2,
                           test_frac=0.1, split_frac=0.4, encoder=HashingEncoder())
    b = Bench(tmp_path / "bench")
    assert manifest["shots"] == [2, 4] and b.clients == 2
    assert [q.id for q in b.questions(1, "train", shots=2)] == [q.id for q in b.questions(1, "train")[:2]]
    assert len(b.questions(0, "test")) == 2 and b.questions(0, "test")[0].gold_doc_ids
    with pytest.raises(ConfigError, match="at most 4"):
        b.questions(0, "train", shots=8)
    assert b.train_store("REL-1", 0) == "rel" and b.train_store("REL-1", 1) == "irr"
    assert b.train_store("REL+IRR", 1) == b.train_store("REL+IRR", None) == "rel+irr"
    old = {**b.manifest, "variants": {k: v for k, v in b.manifest["variants"].items() if k != "REL+IRR"}}
    b.manifest = old  # a bench built before the Table 2 stores
    with pytest.raises(ConfigError, match="built without the REL\\+IRR store"):
        b.train_store("REL+IRR", 0)
    from tandem.federated.corag import check_spec

    assert check_spec(RunSpec(bench=str(tmp_path / "bench"), shots=4)).clients == 2
    for bad, match in (({"variant": "FOO"}, "unknown store variant"), ({"shots": 8}, "shots=8"),
                       ({"clients": 3}, "clients=3"), ({"split": "train"}, "Input should be 'test' or 'dev'"),
                       ({"rounds": 0}, "rounds': Input should be greater than or equal to 1")):
        with pytest.raises(ConfigError, match=match):
            check_spec(RunSpec.from_dict({"bench": str(tmp_path / "bench"), "shots": 2, **bad}))
    splits = splits_from(b)
    labels = {rec["id"]: Labels(tuple(rec["relevant"]), tuple(rec["hard_negatives"]))
              for rec in map(json.loads, (tmp_path / "bench" / "labels.jsonl").read_text().splitlines())}
    ids = {name: [json.loads(line)["id"] for line in (b.store_path(name) / "docs.jsonl").read_text().splitlines()]
           for name in manifest["store_sizes"]}
    check_bench(splits, labels, Stores(ids, manifest["variants"], manifest["central"], manifest["test_stores"]))


# --- FedAvg -------------------------------------------------------------------------------------

def test_fedavg_weights_by_examples():
    a = {"w": np.array([0.0, 2.0], dtype=np.float32), "b": np.array([[1.0]], dtype=np.float32)}
    b = {"w": np.array([4.0, 6.0], dtype=np.float32), "b": np.array([[5.0]], dtype=np.float32)}
    out = fedavg([a, b], [1, 3])
    np.testing.assert_allclose(out["w"], [3.0, 5.0])
    np.testing.assert_allclose(out["b"], [[4.0]])
    assert out["w"].dtype == np.float32
    np.testing.assert_allclose(fedavg([a, b], [2, 2])["w"], [2.0, 4.0])


def test_fedavg_matches_flower():
    from flwr.app import MetricRecord, RecordDict
    from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

    from tandem.federated.apps import from_record, to_record

    rng = np.random.default_rng(0)
    updates = [{"x": rng.normal(size=(3, 2)).astype(np.float32), "y": rng.normal(size=5).astype(np.float32)} for _ in range(3)]
    counts = [16, 32, 64]
    records = [RecordDict({"arrays": to_record(u), "metrics": MetricRecord({"num-examples": n})}) for u, n in zip(updates, counts, strict=True)]
    theirs = from_record(aggregate_arrayrecords(records, "num-examples"))
    ours = fedavg(updates, counts)
    for k in ours:
        np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-5)


def test_fedavg_errors():
    with pytest.raises(ConfigError, match="at least one"):
        fedavg([], [])
    with pytest.raises(ConfigError, match="positive sum"):
        fedavg([{"w": np.zeros(1)}], [0])
    with pytest.raises(ConfigError, match="different shapes"):
        fedavg([{"w": np.zeros(1)}, {"w": np.zeros(2)}], [1, 1])
    with pytest.raises(ConfigError, match="the others did not"):
        fedavg([{"w": np.zeros(1)}, {"v": np.zeros(1)}], [1, 1])


# --- perplexity distillation --------------------------------------------------------------------

def test_pd_loss_matches_hand_computation():
    scores = torch.tensor([[2.0, 0.0, -1.0]])
    logliks = torch.tensor([[-0.5, -2.0, -4.0]])
    p_lm = [math.exp(x) for x in (-0.5, -2.0, -4.0)]
    p_lm = [x / sum(p_lm) for x in p_lm]
    p_r = [math.exp(x) for x in (2.0, 0.0, -1.0)]
    p_r = [x / sum(p_r) for x in p_r]
    kl = sum(a * math.log(a / b) for a, b in zip(p_lm, p_r, strict=True))
    assert perplexity_distillation_loss(scores, logliks).item() == pytest.approx(kl, rel=1e-5)
    # temperature 2 on the reader side flattens the target
    p2 = [math.exp(x / 2) for x in (-0.5, -2.0, -4.0)]
    p2 = [x / sum(p2) for x in p2]
    kl2 = sum(a * math.log(a / b) for a, b in zip(p2, p_r, strict=True))
    assert perplexity_distillation_loss(scores, logliks, lm_temperature=2.0).item() == pytest.approx(kl2, rel=1e-5)


def test_pd_loss_zero_when_distributions_agree_and_gradient_only_to_retriever():
    logliks = torch.tensor([[0.1, -1.0], [-3.0, 0.5]], requires_grad=True)
    scores = logliks.detach().clone().requires_grad_(True)
    loss = perplexity_distillation_loss(scores, logliks)
    assert loss.item() == pytest.approx(0.0, abs=1e-7)
    scores2 = torch.zeros(2, 2, requires_grad=True)
    perplexity_distillation_loss(scores2, logliks).backward()
    assert logliks.grad is None
    assert scores2.grad[0, 0] < 0 < scores2.grad[0, 1]  # raise the passage the reader likes
    with pytest.raises(ConfigError, match="batch, k"):
        perplexity_distillation_loss(torch.zeros(3), torch.zeros(3))


# --- tiny model: parameters, training loop, evaluation ------------------------------------------

class _TinyRetriever(torch.nn.Module):
    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.enc = HashingEncoder(dim=dim)
        self.proj = torch.nn.Linear(dim, dim)
        torch.nn.init.eye_(self.proj.weight)
        torch.nn.init.zeros_(self.proj.bias)

    def forward(self, texts):
        return torch.nn.functional.normalize(self.proj(torch.from_numpy(self.enc.encode(texts))), dim=-1)


class _TinyReader:
    """Likes passages that contain the answer; its NLL is a quadratic in one parameter."""

    def __init__(self) -> None:
        self.model = torch.nn.Linear(2, 1)

    def trainable(self):
        return dict(self.model.named_parameters())

    def answer_logliks(self, question, passages, answer):
        return torch.tensor([0.0 if answer in d.text else -5.0 for d in passages])

    def nll(self, question, passages, answer):
        return (self.model.weight ** 2).sum() + 1.0

    def generate(self, questions, passages):
        return [p[0].text.split()[-1] if p else "unknown" for p in passages]


class _TinyStore:
    def __init__(self, docs, dim: int = 16) -> None:
        self.docs = docs
        self.vectors = HashingEncoder(dim=dim).encode([d.contents for d in docs])
        self.encoder_name = None

    def search(self, queries, k):
        return np.argsort(-(queries @ self.vectors.T), axis=1)[:, :k]


def _tiny_model() -> CoRAGModel:
    return CoRAGModel(ModelConfig(encoder="hashing", top_k=2), reader=_TinyReader(), retriever=_TinyRetriever())


def test_parameters_round_trip_to_numpy():
    m = _tiny_model()
    arrays = m.get_arrays()
    assert set(arrays) == {"retriever.proj.weight", "retriever.proj.bias", "reader.weight", "reader.bias"}
    changed = {k: v + 1.0 for k, v in arrays.items()}
    m.set_arrays(changed)
    for k, v in m.get_arrays().items():
        np.testing.assert_allclose(v, changed[k])
    with pytest.raises(DataError, match="missing"):
        m.set_arrays({k: v for k, v in arrays.items() if k != "reader.bias"})
    with pytest.raises(DataError, match="shape"):
        m.set_arrays({**arrays, "reader.bias": np.zeros(3, np.float32)})


def test_train_local_updates_both_sides_and_evaluate_scores():
    docs = [Document("a", "A", "alpha beta paris"), Document("b", "B", "alpha gamma rome"), Document("c", "C", "delta")]
    store = _TinyStore(docs)
    qs = [Question("q1", "alpha capital", ("paris",), ("a",)), Question("q2", "alpha city", ("rome",), ("b",))]
    m = _tiny_model()
    before = m.get_arrays()
    stats = train_local(m, qs, store, TrainSettings(epochs=2, batch_size=2, lr_retriever=0.1, lr_reader=0.1))
    after = m.get_arrays()
    assert stats["num-examples"] == 2 and stats["steps"] == 2 and stats["pd_loss"] > 0
    assert not np.allclose(before["retriever.proj.weight"], after["retriever.proj.weight"])
    assert not np.allclose(before["reader.weight"], after["reader.weight"])
    metrics, records = evaluate(m, qs, store, batch_size=1)
    assert metrics["num-examples"] == 2 and len(records) == 2
    # the figure is the records' mean, and each record's EM is the prediction scored against its gold answers
    assert metrics["em"] == pytest.approx(100 * sum(r["em"] for r in records) / 2)
    assert all(r["em"] == exact_match(r["prediction"], r["answers"]) for r in records)
    assert {r["id"] for r in records} == {"q1", "q2"} and all(r["hit"] is not None for r in records)
    closed, recs = evaluate(m, qs, None)
    assert closed["em"] == 0.0 and "hit@k" not in closed and recs[0]["prediction"] == "unknown"


def test_clean_answer():
    assert clean_answer("The answer is: Paris\nmore") == "Paris"
    assert clean_answer("\n\n1901") == "1901"
    assert clean_answer("The answer to the question is: 20") == "20"
    assert clean_answer("Answering machines") == "Answering machines"
    assert clean_answer("") == ""


def test_run_spec_round_trips_and_rejects_unknown_keys():
    spec = RunSpec(bench="/b", shots=32, eval_rounds=(1,), model=ModelConfig(top_k=5), train=TrainSettings(epochs=3))
    again = RunSpec.from_json(spec.to_json())
    assert again == spec
    cfg = RunSpec.from_run_config({"bench": "/b", "rounds": 3, "model.top-k": 2, "train.lr-reader": 0.01, "eval-rounds": "1,2"})
    assert cfg.rounds == 3 and cfg.model.top_k == 2 and cfg.train.lr_reader == 0.01 and cfg.eval_rounds == (1, 2)
    with pytest.raises(ConfigError, match="unknown setting .roundz.; valid settings"):
        RunSpec.from_dict({"bench": "/b", "roundz": 1})
    with pytest.raises(ConfigError, match="needs 'bench'"):
        RunSpec.from_run_config({"rounds": 1})
    assert spec.evaluated(2) and spec.evaluated(1) and not RunSpec(bench="/b", rounds=3).evaluated(2)


def test_paired_bootstrap_and_question_scores(tmp_path):
    from tandem.federated.corag import paired_bootstrap, question_scores
    from tandem.io import write_jsonl_atomic

    a = {f"q{i}": 1.0 for i in range(10)}
    b = {f"q{i}": float(i < 5) for i in range(10)}
    diff, lo, hi = paired_bootstrap(a, b)
    assert diff == pytest.approx(50.0) and lo <= diff <= hi and 0 < lo
    assert paired_bootstrap(a, a) == (0.0, 0.0, 0.0)
    with pytest.raises(ConfigError, match="share no question"):
        paired_bootstrap(a, {"x": 1.0})
    pred = tmp_path / "predictions"
    write_jsonl_atomic(pred / "collaborative-round1-client0.jsonl", [{"id": "q1", "em": 0.0, "f1": 0.2}])
    write_jsonl_atomic(pred / "collaborative-round2-client0.jsonl", [{"id": "q1", "em": 1.0, "f1": 1.0}])
    assert question_scores(tmp_path) == {"q1": (1.0, 1.0)}  # the last evaluated round
