"""CoRAG end to end on the embedded models: a tiny CRAB bench from 60 NQ-open oracle questions, then
Flower's simulation runtime (ServerApp + ClientApp, FedAvg) with 2 clients x 2-shot x 1 round, and
the Local baseline through the same training loop. Checks shapes and files, not answer quality."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from tests.conftest import shared

from tandem.eval.rundir import RunDir
from tandem.federated.bench_io import Bench, build_bench
from tandem.federated.corag import finish, run_baseline, simulate
from tandem.federated.local_training import TrainSettings
from tandem.federated.model import ModelConfig
from tandem.federated.spec import RunSpec

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tiny_bench(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corag")
    with gzip.open(shared("nq/nq-open-oracle.jsonl.gz"), "rt", encoding="utf-8") as handle:
        lines = [next(handle) for _ in range(60)]
    (folder / "nq60.jsonl").write_text("".join(lines), encoding="utf-8")
    build_bench(folder / "nq60.jsonl", folder / "bench", clients=2, shots=(2,), dev=0, test=2,
                train_frac=0.5, test_frac=0.2, split_frac=0.25)
    return folder / "bench"


def _spec(bench, out) -> RunSpec:
    return RunSpec(bench=str(bench), variant="REL", shots=2, rounds=1, eval_limit=2, threads=1, out_dir=str(out),
                   model=ModelConfig(top_k=2, passage_tokens=32, max_answer_tokens=6),
                   train=TrainSettings(epochs=1, batch_size=2))


def test_flower_simulation_two_clients(tiny_bench, tmp_path):
    b = Bench(tiny_bench)
    assert b.clients == 2 and len(b.questions(0, "train", shots=2)) == 2
    spec = _spec(tiny_bench, tmp_path / "collab")
    result = simulate(spec)
    assert result["questions"] == 4
    clients = result["per_client"]  # the macro figure is the clients' mean, each client's EM a share of its 2 questions
    assert result["em_macro"] == pytest.approx(sum(c["em"] for c in clients) / len(clients), abs=0.01)
    assert all(c["em"] in (0.0, 50.0, 100.0) for c in clients)
    assert [r["client-id"] for r in result["per_client"]] == [0, 1]
    rounds = [json.loads(x) for x in (tmp_path / "collab" / "rounds.jsonl").read_text().splitlines()]
    assert [(r["round"], r["phase"]) for r in rounds] == [(1, "train"), (1, "evaluate")]
    assert all(c["num-examples"] == 2 for c in rounds[0]["clients"])
    arrays = np.load(tmp_path / "collab" / "global.npz")
    assert any(k.startswith("retriever.") for k in arrays) and any("lora" in k for k in arrays)
    assert (tmp_path / "collab" / "predictions" / "collaborative-round1-client1.jsonl").is_file()


def test_local_baseline_and_run_folder(tiny_bench, tmp_path):
    spec = _spec(tiny_bench, tmp_path / "local")
    out = RunDir(tmp_path / "local", "corag-run")
    result = run_baseline(spec, "local", out)
    metrics = finish(out, spec, result, 1.0, 0.5)
    assert metrics["questions"] == 4 and "hit@k_macro" in metrics
    assert (tmp_path / "local" / "metrics.md").read_text().startswith("# local")
