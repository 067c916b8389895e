"""Training R²-Former (and optionally LoRA on the LLM) for R²AG (methods.md §2.5; paper §3.5).

    L = L_LM + w · L_relevance          w = 1 in the paper; w = 0 is the "without L_relevance" ablation

L_LM is the causal-LM loss of the frozen LLM on the retrieval-aware prompt whose placeholder embeddings
are the projected R²-Former vectors; gradients reach R²-Former and the projection through
``inputs_embeds``. ``lm_loss="answer"`` (default) scores the answer tokens only; ``"sequence"`` scores
the whole prompt too, as the authors' SFTTrainer does (placeholder positions are never targets).
L_relevance is BCE of the relevance head against gold documents. AdamW, constant lr after a linear
warm-up, gradient clipping, gradient accumulation over single examples (no padding on CPU).

A checkpoint folder (:mod:`.former`) is written every ``save_every`` optimizer steps and at the end, with the
optimizer state and the data position: training resumes from it where it stopped. :func:`run_training` is
``tandem train r2ag`` (its settings: :class:`tandem.methods.r2ag.trainer.R2AGTrainRun`).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tandem.errors import ConfigError
from tandem.index.store import DocStore
from tandem.methods.base import Search
from tandem.methods.r2ag.algorithm import inject
from tandem.methods.r2ag.former import (
    LORA_DIR,
    R2Former,
    R2FormerConfig,
    load_r2former,
    load_trainer_state,
    relevance_loss,
    save_checkpoint,
)
from tandem.methods.r2ag.prompts import build_prompt, choose_placeholder
from tandem.methods.r2ag.train_lists import RankedList, build_lists, cached_lists, files_identity, lists_key
from tandem.methods.r2ag.trainer import R2AGTrainRun, R2AGTrainSettings
from tandem.train.specs import backend_options
from tandem.types import OnProgress

RUN_ONLY = ("max_minutes", "max_steps", "eval_every", "save_every")  # settings a resumed run may change
R2AGTrainConfig = R2AGTrainSettings  # the hyper-parameters' name in the training code before they were a settings model


class LossComputer:
    """L_LM and L_relevance of one ranked list for a given LLM, R²-Former and prompt settings."""

    def __init__(self, llm: Any, model: R2Former, config: R2AGTrainSettings) -> None:
        self.llm, self.model, self.config = llm, model, config
        self.placeholder = choose_placeholder(llm.tokenizer, llm.eos_token_ids, config.placeholder)
        self._cache: dict[str, tuple[list[int], list[int], list[int]]] = {}

    def tokens(self, ex: RankedList) -> tuple[list[int], list[int], list[int]]:
        """(prompt ids, placeholder positions, answer ids + end-of-turn id), cached per question."""
        if ex.qid not in self._cache:
            prompt = build_prompt(self.llm.tokenizer, ex.question, ex.docs, self.placeholder,
                                  template=self.config.template, doc_words=self.config.doc_words)
            target = self.llm.tokenizer(ex.answer, add_special_tokens=False)["input_ids"] + [self.llm.eos_token_ids[0]]
            self._cache[ex.qid] = (prompt.ids, prompt.positions, target)
        return self._cache[ex.qid]

    def __call__(self, ex: RankedList) -> tuple[torch.Tensor, torch.Tensor]:
        ids, positions, target = self.tokens(ex)
        vectors, logits = self.model(torch.from_numpy(ex.feats)[None])
        all_ids = torch.tensor([ids + target])
        embeds = inject(self.llm.embed_ids(all_ids)[0], positions, vectors[0])
        if self.config.lm_loss == "answer":
            # logits only where they predict an answer token: the LM head over a 150k vocabulary at every
            # prompt position was ~20 % of a training example's time on the 1.5B (the loss is the same)
            out = self.llm.forward(inputs_embeds=embeds[None], output_hidden_states=False, logits_to_keep=len(target) + 1)
            scored = out.logits[0, -(len(target) + 1):-1].float()
            lm = torch.nn.functional.cross_entropy(scored, torch.tensor(target, device=scored.device))
        else:
            labels = all_ids.clone()
            labels[0, positions] = -100  # a placeholder is a vector, not a token to predict
            lm = self.llm.forward(inputs_embeds=embeds[None], labels=labels, output_hidden_states=False).loss
        return lm, relevance_loss(logits[0], torch.from_numpy(ex.labels))


def validation_loss(compute: LossComputer, examples: Sequence[RankedList], weight: float,
                    on_progress: OnProgress | None = None) -> dict[str, float]:
    """Mean L_LM, L_relevance and L = L_LM + w L_relevance over ``examples`` (eval mode, no gradients);
    ``on_progress(done, total)`` after each (50 lists on the 1.5B on 2 cores: ~20-40 min)."""
    was = compute.model.training
    compute.model.eval()
    lm = rel = 0.0
    with torch.no_grad():
        for done, ex in enumerate(examples, 1):
            a, b = compute(ex)
            lm, rel = lm + a.item(), rel + b.item()
            if on_progress is not None:
                on_progress(done, len(examples))
    compute.model.train(was)
    n = max(1, len(examples))
    return {"lm": round(lm / n, 4), "relevance": round(rel / n, 4), "total": round((lm + weight * rel) / n, 4)}


def _lora(llm: Any, config: R2AGTrainSettings) -> Any:
    from peft import LoraConfig, get_peft_model

    llm.model = get_peft_model(llm.model, LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha,
                                                     lora_dropout=config.lora_dropout, target_modules=["q_proj", "v_proj"]))
    return llm.model


def train_r2ag(llm: Any, train: Sequence[RankedList], val: Sequence[RankedList], out: str | Path,
               config: R2AGTrainSettings, *, encoder_name: str = "minilm", resume: bool = True,
               on_step: Callable[[int, int, float], None] | None = None) -> dict[str, Any]:
    """Train an R²-Former for ``llm`` (an in-process HF model, frozen unless ``lora_r``) into ``out``.
    ``on_step(step, total, loss)`` after each optimizer step (``loss``: L_LM + w L_relevance of the step;
    on a resumed run ``step`` starts past 1)."""
    if not train:
        raise ConfigError("no training questions with gold answers and documents")
    out = Path(out)
    torch.manual_seed(config.seed)
    for p in llm.model.parameters():
        p.requires_grad_(False)
    table = llm.input_embeddings().weight
    model = R2Former(R2FormerConfig(
        llm_hidden=int(table.shape[1]), d_model=config.d_model, drop_features=list(config.drop_features),
        gamma_first=config.gamma_first, embed_std=float(table.detach().std()), encoder=encoder_name,
        llm=getattr(llm, "spec", ""), placeholder=config.placeholder or "", template=config.template,
        doc_words=config.doc_words, max_k=max(64, config.k), projection=config.projection))
    peft_model = _lora(llm, config) if config.lora_r > 0 else None
    params = [*model.parameters(), *([p for p in peft_model.parameters() if p.requires_grad] if peft_model else [])]
    optim = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    steps_per_epoch = max(1, len(train) // config.grad_accum)
    total = steps_per_epoch * config.epochs
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    warm = max(1, int(config.warmup * total))
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: min(1.0, (s + 1) / warm))
    compute = LossComputer(llm, model, config)
    if config.projection == "scaled":  # start from the prompt without retrieval information
        model.start_at(llm.embed_ids(torch.tensor([[compute.placeholder[1]]]))[0, 0])
    stage = getattr(on_step, "stage", None)  # the command line's bar (TrainingProgress)

    def val_progress(when: str) -> OnProgress | None:
        return stage(f"validation loss {when}") if stage else None

    state = load_trainer_state(out) if resume else None
    log: dict[str, Any]
    if state is not None:
        if _model_settings(state["config"]) != _model_settings(config.to_dict()):
            raise ConfigError(f"{out} was trained with other settings; use another --out or --no-resume")
        model.load_state_dict(torch.load(out / "r2former.pt", map_location="cpu", weights_only=True))
        optim.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        if peft_model is not None:
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            set_peft_model_state_dict(peft_model, load_file(str(out / LORA_DIR / "adapter_model.safetensors")))
        torch.set_rng_state(state["torch_rng"])
        step, log = state["step"], state["log"]
    else:
        step = 0
        log = {"config": config.to_dict(), "train_questions": len(train), "val_questions": len(val),
               "val_before": validation_loss(compute, val, config.relevance_weight, val_progress("before")) if val else None,
               "val_history": [], "train_loss": [], "minutes": 0.0, "stopped_early": None}

    def checkpoint() -> None:
        trainer = {"config": config.to_dict(), "step": step, "optimizer": optim.state_dict(),
                   "scheduler": sched.state_dict(), "torch_rng": torch.get_rng_state(), "log": log}
        save_checkpoint(out, model, trainer, peft_model.save_pretrained if peft_model is not None else None)

    model.train()
    start, spent = time.monotonic(), float(log["minutes"])
    while step < total:
        epoch, at = divmod(step, steps_per_epoch)
        order = list(range(len(train)))
        random.Random(config.seed + epoch).shuffle(order)
        batch = [train[i] for i in order[at * config.grad_accum:(at + 1) * config.grad_accum]]
        optim.zero_grad()
        lm_sum = rel_sum = 0.0
        for ex in batch:
            lm, rel = compute(ex)
            ((lm + config.relevance_weight * rel) / len(batch)).backward()
            lm_sum, rel_sum = lm_sum + lm.item(), rel_sum + rel.item()
        torch.nn.utils.clip_grad_norm_(params, config.clip)
        optim.step()
        sched.step()
        step += 1
        log["train_loss"].append([step, round(lm_sum / len(batch), 4), round(rel_sum / len(batch), 4)])
        if on_step is not None:
            on_step(step, total, (lm_sum + config.relevance_weight * rel_sum) / len(batch))
        elapsed = spent + (time.monotonic() - start) / 60
        log["minutes"] = round(elapsed, 2)
        over = elapsed >= config.max_minutes
        if val and (step % config.eval_every == 0 or step == total or over):
            log["val_history"].append({"step": step, **validation_loss(compute, val, config.relevance_weight,
                                                                        val_progress(f"at step {step}"))})
        if step % config.save_every == 0 and step < total and not over:
            checkpoint()
        if over:
            log["stopped_early"] = f"time cap {config.max_minutes} min reached at step {step} of {total}"
            break
    log["steps"], log["planned_steps"] = step, total
    log["val_after"] = log["val_history"][-1] if log["val_history"] else None
    checkpoint()
    return log


def _model_settings(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in RUN_ONLY}


def average_precision(scores: Sequence[float], labels: Sequence[float]) -> float:
    """AP of the ranking by ``scores`` (descending) against binary ``labels`` (0 when there is no gold)."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    rel = np.asarray(labels)[order] > 0
    if not rel.any():
        return 0.0
    hits = np.cumsum(rel)
    return float(np.mean((hits / np.arange(1, len(rel) + 1))[rel]))


def recall_at(scores: Sequence[float], labels: Sequence[float], n: int) -> float:
    """Fraction of gold documents in the top ``n`` by ``scores``."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    labels = np.asarray(labels)
    return float(labels[order[:n]].sum() / labels.sum()) if labels.sum() else 0.0


def ranking_quality(model: R2Former, lists: Sequence[RankedList]) -> dict[str, dict[str, float]]:
    """MAP, R@1, R@2 of the relevance head's order and of the raw r order, against gold documents."""
    model.eval()
    rows: dict[str, list[list[float]]] = {"relevance_head": [], "raw_r": []}
    with torch.no_grad():
        for ex in lists:
            head = model(torch.from_numpy(ex.feats)[None])[1][0].tolist()
            raw = [float(-i) for i in range(len(ex.docs))]  # the list is already sorted by r
            for name, scores in (("relevance_head", head), ("raw_r", raw)):
                rows[name].append([average_precision(scores, ex.labels), recall_at(scores, ex.labels, 1),
                                   recall_at(scores, ex.labels, 2)])
    return {name: {m: round(float(np.mean([r[i] for r in vals])), 4) for i, m in enumerate(("MAP", "R@1", "R@2"))}
            for name, vals in rows.items() if vals}


def _part(questions: str) -> slice:
    start, _, end = questions.partition(":")
    return slice(int(start or 0), int(end) if end else None)


def run_training(spec: R2AGTrainRun, out: Path, on_step: Callable[[int, int, float], None] | None = None) -> dict[str, Any]:
    """``tandem train r2ag``: ranked lists of ``spec``'s training and validation questions, an R²-Former trained
    for ``spec.llm`` into ``out`` (:func:`train_r2ag`), and the report - validation loss before and after, the
    relevance head's ranking against the raw r order - written to ``out/train_report.json`` and returned."""
    from tandem.corpus import load_dataset
    from tandem.index.encoder import load_encoder
    from tandem.llm import load_llm
    from tandem.methods.r2ag.algorithm import embedding_backend
    from tandem.outdir import add_file

    config = spec.hyper()
    llm_options = backend_options(spec.llm, spec.llm_options)
    ds = load_dataset(spec.dataset)
    train_qs = ds.questions[_part(spec.train_questions)]
    val_qs = ds.questions[_part(spec.val_questions)] if spec.val_questions else []
    if {q.id for q in train_qs} & {q.id for q in val_qs}:
        raise ConfigError("--train-questions and --val-questions overlap")
    search = None
    if spec.index is not None:
        from tandem.index import open_index
        from tandem.retrieve import open_retriever

        idx = open_index(spec.index)
        search = Search(open_retriever(idx), idx.store)
    store, encoder = DocStore(ds.passages), load_encoder(spec.encoder)
    stage = getattr(on_step, "stage", None)  # the command line's bar (TrainingProgress): the lists take minutes
    lists = {}
    for name, part, qs in (("train", spec.train_questions, train_qs), ("val", spec.val_questions, val_qs)):
        key = lists_key(dataset=files_identity(spec.dataset), questions=part, k=config.k,
                        encoder=[spec.encoder, type(encoder).__name__,
                                 files_identity(spec.encoder) if Path(spec.encoder).exists() else None],
                        index=files_identity(spec.index) if spec.index is not None else None,
                        drop=list(config.drop_features), gamma_first=config.gamma_first)
        lists[name] = cached_lists(key, qs, store, lambda qs=qs, name=name: build_lists(
            qs, store, encoder, k=config.k, search=search, drop=config.drop_features, gamma_first=config.gamma_first,
            on_progress=stage(f"{name} lists") if stage else None))
    backend = embedding_backend(load_llm(spec.llm, **llm_options))
    if not hasattr(backend, "model"):
        raise ConfigError("training needs an in-process LLM (--llm local or hf:PATH)")
    log = train_r2ag(backend, lists["train"], lists["val"], out, config, encoder_name=spec.encoder,
                     resume=spec.resume, on_step=on_step)
    report = {"dataset": str(spec.dataset), "train_questions": spec.train_questions,
              "val_questions": spec.val_questions, "train_lists": len(lists["train"]), "val_lists": len(lists["val"]),
              "steps": log["steps"], "planned_steps": log["planned_steps"], "minutes": log["minutes"],
              "stopped_early": log["stopped_early"], "val_before": log["val_before"], "val_after": log["val_after"],
              "val_ranking": ranking_quality(load_r2former(out), lists["val"]) if lists["val"] else None}
    add_file(out, "train_report.json", json.dumps({**report, "log": log}, indent=1))
    return report
