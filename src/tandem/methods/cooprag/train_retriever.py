"""Retriever fine-tuning with CoopRAG's difficulty-aware weighted InfoNCE (paper §3.6; methods.md §1.5).

Each training question's query U (the question, or Q ‖ S ‖ R from an unrolling) is paired with each of
its gold passages D+ and, rebuilt every epoch, one hard negative D- drawn from that question's own
distractors (a random pool passage when it has none). For a batch of b instances::

    s(U, D)  = score(U, D) * exp(log_inv_t)                       learnable inverse temperature (1/0.05)
    L        = mean_i a_i * CE(s(U_i, [D_1+..D_b+, D_1-..D_b-]), i)       query -> documents, in-batch
             + beta * mean_i CE(s([U_1..U_b], D_i+), i)                   document -> query (authors' code)
    a_i      = ln(1 + |S_i|)                                              |S_i| = number of sub-questions

Other gold passages of the same question (and the same question's other queries in the backward
term) are masked out of the candidates: they are not negatives. ``score`` (``TrainConfig.score``,
``tandem.train.scores``) is ``rala`` (default, the authors' training logit: RaLa's Eq. 4, w * avg
MaxSim, from the encoder's hidden states) or ``cosine`` (the model's own sentence embedding, the
dense first stage alone). |S_i| is the unrolling's sub-question count when ``--unrollings`` cover
the question, else its MuSiQue decomposition's length, else a default; each example records which
(``n_sub_source``) and the log counts them. The result is saved with sentence-transformers'
``save``: pass the folder as ``--encoder`` to ``tandem index``.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tandem.errors import DataError
from tandem.index.store import DocStore
from tandem.methods.cooprag.trainer import RetrieverTrainRun, RetrieverTrainSettings
from tandem.model_files import offline_env, resolve_model
from tandem.outdir import atomic_dir
from tandem.train.scores import make_score
from tandem.types import Question

# where a training question's |S| came from (TrainQuestion.n_sub_source)
N_SUB_SOURCES = ("unrolled", "decomposition", "default")


@dataclass(frozen=True)
class TrainQuestion:
    """A training question: its query text, gold passages, distractors and sub-question count."""

    id: str
    query: str
    positives: tuple[str, ...]
    negatives: tuple[str, ...]
    n_sub: int
    n_sub_source: str = "default"  # one of N_SUB_SOURCES


@dataclass(frozen=True)
class Instance:
    """One (U, D+, D-) triple of an epoch."""

    qid: str
    query: str
    positive: str
    negative: str
    n_sub: int


TrainConfig = RetrieverTrainSettings  # the hyper-parameters (tandem.methods.cooprag.trainer)


def difficulty_weight(n_sub: int) -> float:
    """a = ln(1 + |S|) (paper Eq. 6)."""
    return math.log1p(n_sub)


def training_questions(questions: Sequence[Question], store: DocStore, *, unrollings: Mapping[str, Any] | None = None,
                       parts: str = "q+s+r", default_n_sub: int = 2) -> list[TrainQuestion]:
    """Training questions with gold passages in ``store``; distractors are the question's other context
    passages (``metadata['context_ids']``). With ``unrollings`` (id -> ``Unrolled``) the query is U
    (``parts`` of Q ‖ S ‖ R) and |S| its sub-question count; else the question, and |S| the length of
    its MuSiQue decomposition, else ``default_n_sub`` (also used when an unrolling fell back to no S).
    ``n_sub_source`` says which of the three gave |S|."""
    from tandem.methods.cooprag.algorithm import render_query

    out = []
    for q in questions:
        gold = [d for d in q.gold_doc_ids if d in store]
        if not gold:
            continue
        context = [d for d in q.metadata.get("context_ids", []) if d in store and d not in q.gold_doc_ids]
        unrolled = (unrollings or {}).get(q.id)
        query = render_query(q.text, unrolled, parts) if unrolled is not None else q.text
        n_sub, source = sub_question_count(q, unrolled, default_n_sub)
        out.append(TrainQuestion(q.id, query, tuple(store.get(d).contents for d in gold),
                                 tuple(store.get(d).contents for d in context), n_sub, source))
    return out


def sub_question_count(question: Question, unrolled: Any | None, default: int) -> tuple[int, str]:
    """(|S|, source): the unrolling's sub-questions, else the MuSiQue decomposition, else ``default``."""
    if unrolled is not None and unrolled.sub_questions:
        return len(unrolled.sub_questions), "unrolled"
    if question.metadata.get("decomposition"):
        return len(question.metadata["decomposition"]), "decomposition"
    return default, "default"


def alpha_summary(questions: Sequence[TrainQuestion]) -> dict[str, Any]:
    """How many questions took |S| from each source, and how many questions have each a = ln(1 + |S|)."""
    sources = {s: sum(q.n_sub_source == s for q in questions) for s in N_SUB_SOURCES}
    alphas: dict[str, int] = {}
    for q in questions:
        key = f"{difficulty_weight(q.n_sub):.3f}"
        alphas[key] = alphas.get(key, 0) + 1
    return {"n_sub_sources": sources, "alpha_counts": dict(sorted(alphas.items()))}


def _pool_negative(pool: Sequence[str], positives: Sequence[str], rng: random.Random) -> str:
    """A random pool passage that is not one of ``positives`` (a question without hard negatives)."""
    for _ in range(64):
        choice = rng.choice(pool)
        if choice not in positives:
            return choice
    others = [p for p in pool if p not in positives]
    if not others:
        raise DataError("every passage of the pool is a gold passage of one question: no negative to train against")
    return rng.choice(others)


def epoch_instances(questions: Sequence[TrainQuestion], pool: Sequence[str], rng: random.Random) -> list[Instance]:
    """One instance per gold passage with a fresh negative, shuffled: one of the question's hard negatives, or
    a random pool passage that is none of its gold passages."""
    out = [Instance(q.id, q.query, pos, rng.choice(q.negatives) if q.negatives else _pool_negative(pool, q.positives, rng),
                    q.n_sub)
           for q in questions for pos in q.positives]
    rng.shuffle(out)
    return out


def infonce_loss(q: Any, pos: Any, neg: Any, qids: Sequence[str], weights: Any, log_inv_t: Any,
                 backward_weight: float) -> Any:
    """The weighted InfoNCE above with the cosine score, for unit vectors q, pos, neg (b, dim)."""
    return infonce_from_scores(q @ pos.T, q @ neg.T, qids, weights, log_inv_t, backward_weight)


def infonce_from_scores(pos_scores: Any, neg_scores: Any, qids: Sequence[str], weights: Any, log_inv_t: Any,
                        backward_weight: float) -> Any:
    """The weighted InfoNCE above from unscaled score matrices: ``pos_scores[i, j]`` = score(U_i, D_j+),
    ``neg_scores[i, j]`` = score(U_i, D_j-), both (b, b). The backward term reads ``pos_scores`` by column."""
    import torch
    import torch.nn.functional as F

    b = pos_scores.shape[0]
    same = torch.tensor([[a == c for c in qids] for a in qids])
    off_diag = same & ~torch.eye(b, dtype=torch.bool)  # other gold passages / queries of the same question
    scale = log_inv_t.exp()
    target = torch.arange(b)
    # mask after scaling: -inf * scale would give the temperature a NaN gradient
    q2d = torch.cat([(pos_scores * scale).masked_fill(off_diag, float("-inf")), neg_scores * scale], dim=1)
    loss = (weights * F.cross_entropy(q2d, target, reduction="none")).mean()
    if backward_weight:
        d2q = (pos_scores.T * scale).masked_fill(off_diag, float("-inf"))
        loss = loss + backward_weight * F.cross_entropy(d2q, target)
    return loss


def train_retriever(questions: Sequence[TrainQuestion], pool: Sequence[str], out: str | Path, config: TrainConfig,
                    on_step: Callable[[int, int, float], None] | None = None) -> dict[str, Any]:
    """Fine-tune ``config.base`` and save it (sentence-transformers format) into ``out`` atomically.
    Stops early after ``config.max_minutes``. Returns the training log."""
    offline_env()
    import torch
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    model = SentenceTransformer(resolve_model(config.base), device="cpu")
    model.max_seq_length = config.max_length
    model.train()
    log_inv_t = torch.nn.Parameter(torch.tensor(math.log(1.0 / config.temperature)), requires_grad=config.learn_temperature)
    params = [*model.parameters(), *([log_inv_t] if config.learn_temperature else [])]
    optim = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    per_epoch = math.ceil(sum(len(q.positives) for q in questions) / config.batch_size)
    total = max(1, per_epoch * config.epochs)
    warm = max(1, int(config.warmup * total))
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm))))

    score = make_score(config.score, model, layers=tuple(config.rala_layers), cls=config.rala_cls, omega=config.omega)

    start, cpu, step, losses, stopped = time.monotonic(), time.process_time(), 0, [], None
    for epoch in range(config.epochs):
        batches = epoch_instances(questions, pool, rng)
        for i in range(0, len(batches), config.batch_size):
            batch = batches[i:i + config.batch_size]
            if len(batch) < 2:
                continue
            weights = torch.tensor([difficulty_weight(x.n_sub) if config.alpha else 1.0 for x in batch])
            queries = score.encode([x.query for x in batch], documents=False)
            pos = score.matrix(queries, score.encode([x.positive for x in batch], documents=True))
            neg = score.matrix(queries, score.encode([x.negative for x in batch], documents=True))
            loss = infonce_from_scores(pos, neg, [x.qid for x in batch], weights, log_inv_t, config.backward_weight)
            optim.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, config.clip)
            optim.step()
            sched.step()
            step += 1
            losses.append(round(loss.item(), 4))
            if on_step is not None:
                on_step(step, total, loss.item())
            if time.monotonic() - start > 60 * config.max_minutes:
                stopped = f"time cap {config.max_minutes} min reached at epoch {epoch + 1}, step {step}"
                break
            if config.max_steps is not None and step >= config.max_steps:
                stopped = f"step cap {config.max_steps} reached at epoch {epoch + 1}"
                break
        if stopped:
            break
    log = {"config": config.to_dict(), "questions": len(questions), **alpha_summary(questions),
           "steps": step, "planned_steps": total,
           "minutes": round((time.monotonic() - start) / 60, 2),
           "cpu_minutes": round((time.process_time() - cpu) / 60, 2), "temperature": round(1 / log_inv_t.exp().item(), 4),
           "loss_first": losses[:5], "loss_last": losses[-5:], "stopped_early": stopped}
    _save(model, Path(out), log)
    return log


def _save(model: Any, out: Path, log: dict[str, Any]) -> None:
    """Write the model folder next to ``out`` and rename it into place (never a half-written model)."""
    with atomic_dir(out, "retriever") as tmp:
        model.save(str(tmp))
        (tmp / "train_log.json").write_text(json.dumps(log, indent=2), encoding="utf-8")


def recall_on(questions: Sequence[Question], pool: Sequence[Any], encoder: str, index_dir: str | Path,
              build: bool = True, rala: bool = False, candidates: int = 100) -> dict[str, Any]:
    """R@2 / R@5 (percent) of dense retrieval with ``encoder`` over ``pool``, indexed into ``index_dir``
    (``build=False``: an existing index, checked to be ``encoder``'s over ``pool``). Both sides use
    sentence-transformers itself (backend ``st``), so before/after differ only by the weights. ``rala``:
    also the dense top-``candidates`` reranked by RaLa with the same encoder (its default settings, under
    ``"rala rrf"``, and the paper's score alone, ``"rala none"``); the index then stores RaLa's features."""
    from tandem.errors import ConfigError
    from tandem.index import build_index, open_index
    from tandem.index.encoder import load_encoder
    from tandem.index.layers import rala_extras
    from tandem.rerank.base import Reranked
    from tandem.rerank.rala import StoredFeatures, open_rala
    from tandem.retrieve.dense import DenseRetriever

    if build:
        build_index(pool, index_dir, kind="dense", encoder=load_encoder(encoder, backend="st"),
                    extras=[rala_extras(encoder)] if rala else ())
    index = open_index(index_dir, encoder=encoder, corpus=pool, encoder_backend="st")
    dense = DenseRetriever(index)
    out: dict[str, Any] = {**_recall(questions, dense), "questions": len(questions)}
    if rala:
        if not StoredFeatures.available(index):
            raise ConfigError(f"index {index_dir} has no RaLa features: build it with --extras rala")
        reranker = open_rala(index)
        for fuse in ("rrf", "none"):
            reranker.fuse = fuse
            out[f"rala {fuse}"] = _recall(questions, Reranked(dense, reranker, candidates))
    return out


def _recall(questions: Sequence[Question], retriever: Any, batch_size: int = 64) -> dict[str, float]:
    """R@2 and R@5 (%) of ``retriever`` over the questions with gold passages: the mean share of a question's gold
    passages in its top k, as ``tandem eval retrieval`` scores them (computed here: the methods sit below the
    evaluation package, which builds them)."""
    scored = [q for q in questions if q.gold_doc_ids]
    if not scored:
        raise DataError("no question has gold documents: retrieval cannot be evaluated on this dataset")
    found = {2: 0.0, 5: 0.0}
    for start in range(0, len(scored), batch_size):
        batch = scored[start:start + batch_size]
        for q, hits in zip(batch, retriever.search_batch([q.text for q in batch], 10), strict=True):
            gold, ranked = set(q.gold_doc_ids), [h.doc_id for h in hits]
            for k in found:
                found[k] += len(gold & set(ranked[:k])) / len(gold)
    return {f"R@{k}": round(100 * total / len(scored), 1) for k, total in found.items()}


def read_unrollings(path: str | Path) -> dict[str, Any]:
    """id -> ``Unrolled`` from an unrolling cache (JSONL of {id, sub_questions, chain}, as
    ``benchmarks/cooprag_retrieval.py unrolled`` writes it)."""
    from tandem.methods.cooprag.prompts import Unrolled

    out = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        out[rec["id"]] = Unrolled(tuple(rec["sub_questions"]), tuple(tuple(t) for t in rec["chain"]))
    return out


def run_training(spec: RetrieverTrainRun, out: Path, on_step: Any = None) -> dict[str, Any]:
    """``tandem train retriever``: train ``spec``'s questions (plus its extra datasets), R@2/R@5 of the held-apart
    questions before and after, the model saved into ``out`` and the report as ``out/eval.json``; returns it."""
    import json

    from tandem.corpus import load_dataset
    from tandem.errors import ConfigError
    from tandem.index.store import DocStore
    from tandem.outdir import add_file

    def part(spec_slice: str) -> slice:
        start, _, end = spec_slice.partition(":")
        return slice(int(start or 0), int(end) if end else None)

    ds = load_dataset(spec.dataset)
    train_qs = ds.questions[part(spec.train_questions)]
    eval_qs = ds.questions[part(spec.eval_questions)] if spec.eval_questions else []
    if {q.id for q in train_qs} & {q.id for q in eval_qs}:
        raise ConfigError("train_questions and eval_questions overlap")
    unrolled = read_unrollings(spec.unrollings) if spec.unrollings else None
    examples = training_questions(train_qs, DocStore(ds.passages), unrollings=unrolled, parts=spec.query)
    pool = [d.contents for d in ds.passages]
    for extra in spec.extra_dataset:
        more = load_dataset(extra)
        examples += training_questions(more.questions[:spec.extra_limit], DocStore(more.passages), unrollings=unrolled,
                                       parts=spec.query)
        pool += [d.contents for d in more.passages]
    if unrolled is not None and not any(x.n_sub_source == "unrolled" for x in examples):
        raise ConfigError(f"unrollings {spec.unrollings}: no training question has an unrolling with sub-questions")
    config = spec.hyper()
    evals = out.parent / f"{out.name}.eval"
    own = {d for q in eval_qs for d in (*q.metadata.get("context_ids", []), *q.gold_doc_ids)}
    eval_docs = [d for d in ds.passages if spec.eval_pool == "all" or d.id in own]
    before = recall_on(eval_qs, eval_docs, config.base, spec.base_index or evals / "base",
                       build=spec.base_index is None, rala=spec.eval_rala) if eval_qs else None
    log = train_retriever(examples, pool, out, config, on_step)
    after = recall_on(eval_qs, eval_docs, str(out), evals / "tuned", rala=spec.eval_rala) if eval_qs else None
    report = {"spec": spec.to_dict(), "train_examples": len(examples), "eval_passages": len(eval_docs),
              "query": spec.query if spec.unrollings else "q", "before": before, "after": after, "train": log}
    add_file(out, "eval.json", json.dumps(report, indent=2, default=str))
    return report
