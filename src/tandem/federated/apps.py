"""Flower apps for collaborative training: a ServerApp running FedAvg and a ClientApp.

The same two objects run in Flower's simulation runtime (``tandem federate simulate``) and in a
deployment (``flwr run`` against a SuperLink with one SuperNode per client; docs/methods/corag.md):

- ``server_app`` reads the run settings from the Flower run config (``[tool.flwr.app.config]``),
  ``make_server_app(spec)`` takes them directly (the simulation command uses it).
- ``client_app``: its partition is ``node_config["partition-id"]``; ``node_config["bench"]``
  overrides the bench path on a SuperNode whose copy lives elsewhere. The run settings arrive as
  JSON in each message's ConfigRecord, so clients need no settings of their own.

Per round the strategy (Flower's ``FedAvg``, weighted by ``num-examples``) appends a line to
``rounds.jsonl`` in the run folder and saves the global trainable tensors (``global.npz``, atomic).
"""

from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from tandem.federated.bench_io import Bench
from tandem.federated.local_training import evaluate, open_store, shared_model, train_local
from tandem.federated.spec import RunSpec, check_spec
from tandem.io import atomic_open, write_jsonl_atomic

ROUNDS_FILE = "rounds.jsonl"
GLOBAL_FILE = "global.npz"


def to_record(arrays: dict[str, np.ndarray]) -> ArrayRecord:
    """Named numpy arrays -> Flower ArrayRecord (order kept)."""
    return ArrayRecord({name: Array(np.ascontiguousarray(a)) for name, a in arrays.items()})


def from_record(record: ArrayRecord) -> dict[str, np.ndarray]:
    """Flower ArrayRecord -> named numpy arrays."""
    return {name: arr.numpy() for name, arr in record.items()}


def append_line(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line with a single write, flushed to disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


# --- client side ------------------------------------------------------------------------------

client_app = ClientApp()


def _client_setup(msg: Message, context: Context) -> tuple[RunSpec, Bench, int, Any, int]:
    spec = RunSpec.from_json(str(msg.content["config"]["spec"]))
    if spec.threads:
        import torch

        torch.set_num_threads(spec.threads)
    cid = int(context.node_config["partition-id"])
    bench = Bench(str(context.node_config.get("bench", spec.bench)))
    model = shared_model(spec.model)
    model.set_arrays(from_record(msg.content["arrays"]))
    return spec, bench, cid, model, int(msg.content["config"]["server-round"])


@client_app.train()
def client_train(msg: Message, context: Context) -> Message:
    """Copy the global model, retrieve from this client's training store, train locally, reply."""
    spec, bench, cid, model, rnd = _client_setup(msg, context)
    store = open_store(bench.store_path(bench.train_store(spec.variant, cid)))
    questions = bench.questions(cid, "train", shots=spec.shots)
    settings = spec.train.replace(seed=spec.train.seed + 1000 * rnd + cid)
    stats = train_local(model, questions, store, settings)
    metrics = MetricRecord({k: float(v) for k, v in stats.items() if isinstance(v, (int, float))})
    return Message(RecordDict({"arrays": to_record(model.get_arrays()), "metrics": metrics}), reply_to=msg)


@client_app.evaluate()
def client_evaluate(msg: Message, context: Context) -> Message:
    """Answer this client's test questions from its own test store with the global model."""
    spec, bench, cid, model, rnd = _client_setup(msg, context)
    store = open_store(bench.store_path(bench.test_store(cid)))
    questions = bench.questions(cid, spec.split, limit=spec.eval_limit)
    metrics, records = evaluate(model, questions, store, batch_size=spec.eval_batch)
    if spec.out_dir:
        write_jsonl_atomic(Path(spec.out_dir) / "predictions" / f"collaborative-round{rnd}-client{cid}.jsonl", records)
    return Message(RecordDict({"metrics": MetricRecord({**metrics, "client-id": float(cid)})}), reply_to=msg)


# --- server side ------------------------------------------------------------------------------

class CoRAGFedAvg(FedAvg):
    """Flower's FedAvg, evaluating only the rounds ``spec`` asks for and logging every round."""

    def __init__(self, spec: RunSpec, n_clients: int) -> None:
        super().__init__(fraction_train=1.0, fraction_evaluate=1.0, min_train_nodes=n_clients,
                         min_evaluate_nodes=n_clients, min_available_nodes=n_clients)
        self.spec = spec
        self.out = Path(spec.out_dir) if spec.out_dir else None
        self.per_client: dict[int, list[dict[str, float]]] = {}
        self.errors: list[str] = []
        self._t0 = time.monotonic()

    def _errors(self, replies: list[Message], rnd: int, phase: str) -> None:
        for m in replies:
            if m.has_error():
                self.errors.append(f"round {rnd} {phase}: node {m.metadata.src_node_id}: {m.error.reason}")

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        self._errors(replies, server_round, "train")
        arrays, metrics = super().aggregate_train(server_round, replies)
        if self.out is not None:
            if arrays is not None:
                with atomic_open(self.out / GLOBAL_FILE, "wb") as handle:
                    np.savez(handle, **from_record(arrays))
            clients = [dict(next(iter(m.content.metric_records.values()))) for m in replies if not m.has_error()]
            append_line(self.out / ROUNDS_FILE, {"round": server_round, "phase": "train", "clients": clients,
                                                 "aggregate": dict(metrics or {}), "errors": self.errors,
                                                 "elapsed_s": round(time.monotonic() - self._t0, 1)})
        return arrays, metrics

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        if not self.spec.evaluated(server_round):
            return []
        return super().configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        replies = list(replies)
        if not replies:
            return None
        self._errors(replies, server_round, "evaluate")
        rows = [dict(next(iter(m.content.metric_records.values()))) for m in replies if not m.has_error()]
        self.per_client[server_round] = sorted(rows, key=lambda r: r["client-id"])
        metrics = super().aggregate_evaluate(server_round, replies)
        if metrics is not None and "client-id" in metrics:
            del metrics["client-id"]
        if self.out is not None:
            append_line(self.out / ROUNDS_FILE, {"round": server_round, "phase": "evaluate",
                                                 "clients": self.per_client[server_round], "aggregate": dict(metrics or {}),
                                                 "errors": self.errors, "elapsed_s": round(time.monotonic() - self._t0, 1)})
        return metrics


def initial_arrays(spec: RunSpec) -> ArrayRecord:
    """The pretrained trainable tensors (loaded once, then the model is freed on the server)."""
    from tandem.federated.model import CoRAGModel

    model = CoRAGModel(spec.model)
    record = to_record(model.get_arrays())
    del model
    gc.collect()
    return record


def run_server(grid: Grid, spec: RunSpec) -> dict[str, Any]:
    """Algorithm 1's outer loop on Flower: ``spec.rounds`` rounds of FedAvg, then the result summary."""

    n = spec.client_count(check_spec(spec).clients)
    strategy = CoRAGFedAvg(spec, n)
    config = ConfigRecord({"spec": spec.to_json()})
    result = strategy.start(grid=grid, initial_arrays=initial_arrays(spec), num_rounds=spec.rounds,
                            train_config=config, evaluate_config=config, timeout=24 * 3600)
    summary = {"rounds": spec.rounds, "per_client": {str(r): rows for r, rows in strategy.per_client.items()},
               "aggregate": {str(r): dict(m) for r, m in result.evaluate_metrics_clientapp.items()},
               "train": {str(r): dict(m) for r, m in result.train_metrics_clientapp.items()}, "errors": strategy.errors}
    if spec.out_dir:
        from tandem.io import write_json_atomic

        write_json_atomic(Path(spec.out_dir) / "server_result.json", summary)
    return summary


def make_server_app(spec: RunSpec) -> ServerApp:
    """A ServerApp bound to ``spec`` (the simulation command uses this)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        run_server(grid, spec)

    return app


server_app = ServerApp()


@server_app.main()
def server_main(grid: Grid, context: Context) -> None:
    """Deployment entry point: settings from the Flower run config."""
    run_server(grid, RunSpec.from_run_config(dict(context.run_config)))
