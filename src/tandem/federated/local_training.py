"""One client's local training and evaluation, shared by Local, Centralized and Collaborative runs.

``train_local`` is the inner loop of the paper's Algorithm 1 (and all a Local or Centralized run
does): for each labelled pair, retrieve the top-k from the training store with the current query
encoder, then minimise ``L_PD + L_reader`` (see ``model.py``). ``evaluate`` retrieves from a test
store and generates greedy answers, scored with EM / F1 (SQuAD normalisation).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field

from tandem.eval.qa_metrics import exact_match, f1_score
from tandem.federated.model import CoRAGModel, ModelConfig, PassageStore, perplexity_distillation_loss
from tandem.settings import Settings
from tandem.types import OnProgress, Question

Progress = OnProgress


class TrainSettings(Settings):
    """Local optimisation settings (CPU-sized; the paper: AdamW, batch 64, LR 4e-5, 64 epochs/round)."""

    epochs: int = Field(1, ge=1, description="local epochs per round")
    batch_size: int = Field(2, ge=1, description="examples per optimiser step")
    lr_retriever: float = Field(5e-5, gt=0, description="retriever learning rate")
    lr_reader: float = Field(2e-3, gt=0, description="reader (LoRA) learning rate")
    reader_loss_weight: float = Field(1.0, ge=0, description="weight of the reader's NLL")
    retriever_loss_weight: float = Field(1.0, ge=0, description="weight of the perplexity-distillation loss")
    clip: float = Field(1.0, gt=0, description="gradient norm clip")
    seed: int = Field(0, description="random seed")


_CACHE: dict[str, CoRAGModel] = {}
_BASE: dict[str, dict[str, np.ndarray]] = {}
_STORES: dict[str, PassageStore] = {}
_LOCK = threading.Lock()


def shared_model(config: ModelConfig) -> CoRAGModel:
    """One model per process and config, reset to the pretrained weights (clients run sequentially)."""
    key = repr(config.to_dict())
    with _LOCK:
        if key not in _CACHE:
            _CACHE.clear()
            _BASE.clear()
            _CACHE[key] = CoRAGModel(config)
            _BASE[key] = _CACHE[key].get_arrays()
        model = _CACHE[key]
        model.set_arrays(_BASE[key])
        return model


def open_store(folder: str | Path) -> PassageStore:
    """A store opened once per process (stores are read-only)."""
    key = str(Path(folder).resolve())
    with _LOCK:
        if key not in _STORES:
            _STORES[key] = PassageStore(folder)
        return _STORES[key]


def train_local(model: CoRAGModel, questions: Sequence[Question], store: PassageStore, settings: TrainSettings,
                progress: Progress | None = None) -> dict[str, Any]:
    """Train ``model`` in place on ``questions`` retrieving from ``store``; returns loss statistics."""
    if not questions:
        return {"num-examples": 0, "steps": 0}
    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    cfg = model.config
    groups = []
    retr = [p for n, p in model.trainable().items() if n.startswith("retriever.")]
    read = [p for n, p in model.trainable().items() if n.startswith("reader.")]
    if retr:
        groups.append({"params": retr, "lr": settings.lr_retriever})
    if read:
        groups.append({"params": read, "lr": settings.lr_reader})
    optim = torch.optim.AdamW(groups, weight_decay=0.0)
    params = retr + read
    order = list(questions)
    total = settings.epochs * len(order)
    done, steps, pd_sum, nll_sum, start = 0, 0, 0.0, 0.0, time.monotonic()
    model.retriever.train()
    model.reader.model.train()
    for _ in range(settings.epochs):
        rng.shuffle(order)
        for i in range(0, len(order), settings.batch_size):
            batch = order[i:i + settings.batch_size]
            optim.zero_grad()
            scores, rows = model.retrieve(store, [q.text for q in batch], grad=bool(retr))
            for j, q in enumerate(batch):
                docs = [store.docs[int(r)] for r in rows[j] if r >= 0]
                answer = q.answers[0]
                loss = torch.zeros(())
                if retr:
                    ll = model.reader.answer_logliks(q.text, docs, answer).unsqueeze(0)
                    pd = perplexity_distillation_loss(scores[j:j + 1, :len(docs)], ll, cfg.lm_temperature)
                    loss = loss + settings.retriever_loss_weight * pd
                    pd_sum += pd.item()
                nll = model.reader.nll(q.text, docs, answer)
                nll_sum += nll.item()
                if read:
                    loss = loss + settings.reader_loss_weight * nll
                (loss / len(batch)).backward(retain_graph=j < len(batch) - 1)
                done += 1
                if progress is not None:
                    progress(done, total)
            torch.nn.utils.clip_grad_norm_(params, settings.clip)
            optim.step()
            steps += 1
    model.retriever.eval()
    model.reader.model.eval()
    return {"num-examples": len(questions), "steps": steps, "pd_loss": pd_sum / max(1, done),
            "reader_nll": nll_sum / max(1, done), "train_seconds": round(time.monotonic() - start, 1)}


def evaluate(model: CoRAGModel, questions: Sequence[Question], store: PassageStore | None, *,
             batch_size: int = 4, progress: Progress | None = None) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """EM / F1 (percent) and retrieval hit rate of ``model`` answering ``questions`` from ``store``.

    ``store=None`` is the closed-book reader (no passages). Returns (metrics, per-question records).
    """
    records: list[dict[str, Any]] = []
    for i in range(0, len(questions), batch_size):
        batch = list(questions[i:i + batch_size])
        if store is not None:
            _, rows = model.retrieve(store, [q.text for q in batch])
            docs = [[store.docs[int(r)] for r in row if r >= 0] for row in rows]
        else:
            docs = [[] for _ in batch]
        preds = model.reader.generate([q.text for q in batch], docs)
        for q, pred, ds in zip(batch, preds, docs, strict=True):
            ids = [d.id for d in ds]
            records.append({"id": q.id, "question": q.text, "prediction": pred, "answers": list(q.answers),
                            "em": exact_match(pred, q.answers), "f1": f1_score(pred, q.answers),
                            "hit": float(bool(set(ids) & set(q.gold_doc_ids))) if store is not None else None,
                            "doc_ids": ids})
        if progress is not None:
            progress(len(records), len(questions))
    return summarize(records), records


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Mean EM / F1 / hit@k in percent, and the count."""
    n = len(records)
    hits = [r["hit"] for r in records if r.get("hit") is not None]
    out = {"em": 100 * sum(r["em"] for r in records) / max(1, n), "f1": 100 * sum(r["f1"] for r in records) / max(1, n),
           "num-examples": float(n)}
    if hits:
        out["hit@k"] = 100 * sum(hits) / len(hits)
    return out
