"""CoRAG (Muhamed, Diab, Smith 2025), Algorithm 1, and its baselines over one CRAB bench.

Algorithm 1 (collaborative training; ``collaborative`` runs it in-process, ``simulate`` on Flower)::

    R, G <- pretrained retriever and reader
    for t in 1..T:
        for each client i:                               # sequential here; parallel on SuperNodes
            R_i, G_i <- copy(R, G)
            for each local pair (x, y):  z_1..k <- top-k of R_i(x) in client i's training store
                                         update R_i by L_PD, G_i by the reader NLL
        R, G <- FedAvg({R_i, G_i}, weights = n_i)
    inference: client i retrieves from its own test store with (R, G)

Baselines: ``local`` (each client alone on its own pairs and store, same epochs), ``centralized``
(all pairs pooled, the union store), ``closed-book`` (the pretrained reader, no passages) and
``zero-shot`` (the pretrained retriever + reader, no training). Every mode writes a run folder:
config.json, rounds.jsonl, predictions/*.jsonl, metrics.json, metrics.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tandem.errors import ConfigError
from tandem.eval.rundir import RunDir
from tandem.federated.bench_io import Bench
from tandem.federated.fedavg import fedavg
from tandem.federated.local_training import evaluate, open_store, shared_model, summarize, train_local
from tandem.federated.spec import RunSpec, check_spec
from tandem.io import write_jsonl_atomic

Progress = Callable[[str, int, int], None]
MODES = ("collaborative", "local", "centralized", "closed-book", "zero-shot")


class PeakRSS:
    """Samples the resident memory of this process and all its descendants (e.g. Ray workers)."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        import psutil

        me = psutil.Process()
        total = 0
        for p in [me, *me.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, self._sample())
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_bytes = max(self.peak_bytes, self._sample())

    @property
    def peak_gib(self) -> float:
        return round(self.peak_bytes / 2**30, 2)


def _eval_clients(spec: RunSpec, bench: Bench, model: Any, mode: str, out: RunDir | None,
                  progress: Progress | None, closed_book: bool = False) -> list[dict[str, Any]]:
    """Evaluate ``model`` on every client's test questions against its own test store."""
    return [_eval_client(spec, bench, model, cid, mode, out, progress, closed_book)
            for cid in range(spec.client_count(bench.clients))]


def _eval_client(spec: RunSpec, bench: Bench, model: Any, cid: int, mode: str, out: RunDir | None,
                 progress: Progress | None, closed_book: bool = False) -> dict[str, Any]:
    """One client's test questions against its own test store (none: closed book); predictions saved."""
    store = None if closed_book else open_store(bench.store_path(bench.test_store(cid)))
    questions = bench.questions(cid, spec.split, limit=spec.eval_limit)
    cb = (lambda d, t: progress(f"eval client {cid}", d, t)) if progress else None
    metrics, records = evaluate(model, questions, store, batch_size=spec.eval_batch, progress=cb)
    if out is not None:
        write_jsonl_atomic(out.folder / "predictions" / f"{mode}-client{cid}.jsonl", records)
    return {"client-id": cid, **metrics}


def _train(spec: RunSpec, bench: Bench, model: Any, client: int | None, epochs: int, progress: Progress | None) -> dict[str, Any]:
    store = open_store(bench.store_path(bench.train_store(spec.variant, client)))
    clients = range(spec.client_count(bench.clients)) if client is None else [client]
    questions = [q for c in clients for q in bench.questions(c, "train", shots=spec.shots)]
    label = "train pooled" if client is None else f"train client {client}"
    cb = (lambda d, t: progress(label, d, t)) if progress else None
    return train_local(model, questions, store, spec.train.replace(epochs=epochs), cb)


def run_baseline(spec: RunSpec, mode: str, out: RunDir | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """``local`` / ``centralized`` / ``closed-book`` / ``zero-shot``; returns per-client rows and totals."""
    if mode not in MODES or mode == "collaborative":
        raise ConfigError(f"unknown baseline {mode!r}; baselines: {sorted(set(MODES) - {'collaborative'})}")
    bench = check_spec(spec)
    epochs = spec.rounds * spec.train.epochs  # the same passes over the data as the collaborative run
    rows: list[dict[str, Any]] = []
    if mode == "local":
        for cid in range(spec.client_count(bench.clients)):
            model = shared_model(spec.model)  # fresh pretrained weights for each client
            stats = _train(spec, bench, model, cid, epochs, progress)
            _log(out, {"mode": mode, "client": cid, "phase": "train", **stats})
            row = _eval_client(spec, bench, model, cid, mode, out, progress)
            rows.append(row)
            _log(out, {"mode": mode, "client": cid, "phase": "evaluate", **{k: v for k, v in row.items() if k != "client-id"}})
    else:
        model = shared_model(spec.model)
        if mode == "centralized":
            _log(out, {"mode": mode, "phase": "train", **_train(spec, bench, model, None, epochs, progress)})
        rows = _eval_clients(spec, bench, model, mode, out, progress, closed_book=mode == "closed-book")
        _log(out, {"mode": mode, "phase": "evaluate", "clients": rows})
    return {"mode": mode, "per_client": rows, **_totals(rows)}


def collaborative(spec: RunSpec, out: RunDir | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Algorithm 1 in one process (no Flower): the reference the Flower apps are checked against."""
    bench = check_spec(spec)
    n = spec.client_count(bench.clients)
    global_arrays = shared_model(spec.model).get_arrays()
    rows: list[dict[str, Any]] = []
    for rnd in range(1, spec.rounds + 1):
        updates, counts, stats = [], [], []
        for cid in range(n):
            model = shared_model(spec.model)
            model.set_arrays(global_arrays)
            s = _train(spec.replace(train=spec.train.replace(seed=spec.train.seed + 1000 * rnd + cid)), bench, model,
                       cid, spec.train.epochs, progress)
            updates.append(model.get_arrays())
            counts.append(s["num-examples"])
            stats.append(s)
        global_arrays = fedavg(updates, counts)
        _log(out, {"round": rnd, "phase": "train", "clients": stats})
        if spec.evaluated(rnd):
            model = shared_model(spec.model)
            model.set_arrays(global_arrays)
            rows = _eval_clients(spec, bench, model, f"collaborative-round{rnd}", out, progress)
            _log(out, {"round": rnd, "phase": "evaluate", "clients": rows})
    return {"mode": "collaborative", "per_client": rows, **_totals(rows)}


def simulate(spec: RunSpec, parallel: int = 1, cpus: int | None = None) -> dict[str, Any]:
    """Run the Flower ServerApp + ClientApp in Flower's simulation runtime (Ray backend).

    ``parallel`` bounds how many clients run at once (each holds one model copy), by giving every
    client ``cpus / parallel`` of Ray's CPUs.
    """
    import os

    from flwr.simulation import run_simulation

    from tandem.federated.apps import client_app, make_server_app

    if spec.out_dir is None:
        raise ConfigError("simulate needs spec.out_dir (the run folder)")
    n = spec.client_count(check_spec(spec).clients)
    cpus = cpus or len(os.sched_getaffinity(0))
    if not 1 <= parallel <= n:
        raise ConfigError(f"parallel must be between 1 and the number of clients ({n}), got {parallel}")
    backend = {"init_args": {"num_cpus": cpus, "include_dashboard": False},
               "client_resources": {"num_cpus": max(1.0, cpus / parallel), "num_gpus": 0.0}}
    run_simulation(server_app=make_server_app(spec), client_app=client_app, num_supernodes=n, backend_config=backend)
    result_file = Path(spec.out_dir) / "server_result.json"
    if not result_file.is_file():
        raise ConfigError(f"the simulation ended without a result ({result_file} missing); see the log above")
    import json

    result = json.loads(result_file.read_text(encoding="utf-8"))
    if result["errors"]:
        raise ConfigError(f"clients failed: {result['errors'][:3]}")
    rows = result["per_client"].get(str(spec.rounds), [])
    return {"mode": "collaborative", "per_client": rows, **_totals(rows), "flower": result}


def _totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Client-averaged (macro) and question-weighted (micro) EM / F1 / hit@k."""
    if not rows:
        return {}
    out: dict[str, Any] = {}
    for key in ("em", "f1", "hit@k"):
        vals = [r[key] for r in rows if key in r]
        if vals:
            out[f"{key}_macro"] = round(sum(vals) / len(vals), 2)
            weights = [r["num-examples"] for r in rows if key in r]
            out[f"{key}_micro"] = round(sum(v * w for v, w in zip(vals, weights, strict=True)) / sum(weights), 2)
    out["questions"] = int(sum(r["num-examples"] for r in rows))
    return out


def _log(out: RunDir | None, record: dict[str, Any]) -> None:
    if out is not None:
        from tandem.federated.apps import ROUNDS_FILE, append_line

        append_line(out.folder / ROUNDS_FILE, record)


def finish(out: RunDir, spec: RunSpec, result: dict[str, Any], wall_s: float, peak_gib: float) -> dict[str, Any]:
    """Write metrics.json and metrics.md for a finished run; returns the metrics."""
    metrics = {**{k: v for k, v in result.items() if k != "flower"}, "wall_seconds": round(wall_s, 1),
               "peak_rss_gib": peak_gib, "variant": spec.variant, "shots": spec.shots, "rounds": spec.rounds}
    rows = [{"client": int(r["client-id"]), "EM": r["em"], "F1": r["f1"], "hit@k": r.get("hit@k", ""),
             "n": int(r["num-examples"])} for r in result.get("per_client", [])]
    rows.append({"client": "mean", "EM": result.get("em_macro", ""), "F1": result.get("f1_macro", ""),
                 "hit@k": result.get("hit@k_macro", ""), "n": result.get("questions", "")})
    title = (f"{result['mode']} | {spec.variant} | {spec.shots}-shot | {spec.rounds} rounds | "
             f"{wall_s / 60:.1f} min | peak RSS {peak_gib} GiB")
    out.write_metrics(metrics, rows, title)
    return metrics


def question_scores(run_dir: str | Path) -> dict[str, tuple[float, float]]:
    """question id -> (EM, F1) of a finished run (the last evaluated round of a collaborative run)."""
    import json

    folder = Path(run_dir) / "predictions"
    files = sorted(folder.glob("*-client*.jsonl"))
    if not files:
        raise ConfigError(f"{run_dir} has no predictions/*.jsonl")
    rounds = sorted({int(f.name.split("-round")[1].split("-")[0]) for f in files if "-round" in f.name})
    if rounds:
        files = [f for f in files if f"-round{rounds[-1]}-" in f.name]
    out = {}
    for f in files:
        for line in f.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            out[rec["id"]] = (float(rec["em"]), float(rec["f1"]))
    return out


def paired_bootstrap(a: dict[str, float], b: dict[str, float]) -> tuple[float, float, float]:
    """Mean of a - b over the questions both scored, in percent points, and its 95 % bootstrap interval
    (:func:`tandem.eval.intervals.paired_difference`)."""
    from tandem.eval.intervals import paired_difference

    return tuple(100 * x for x in paired_difference(a, b))  # type: ignore[return-value]


def config_record(spec: RunSpec, mode: str, **extra: Any) -> dict[str, Any]:
    """The resolved configuration written to config.json."""
    return {"mode": mode, **spec.to_dict(), **extra, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


__all__ = ["MODES", "PeakRSS", "collaborative", "config_record", "finish", "paired_bootstrap", "question_scores",
           "run_baseline", "simulate", "summarize"]
