"""``tandem train r2ag``: train an R²-Former (R²AG) for a frozen in-process LLM; registered by the CLI package."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from tandem.cli.common import parse_slice, progress_bar
from tandem.outdir import add_file, owned_output


def train_r2ag_command(
    dataset: Annotated[Path, typer.Option(help="QA dataset with gold answers (and gold/context passages).")],
    out_dir: Annotated[Path, typer.Option("--out", help="Checkpoint folder (resumed if it holds a run with the same settings).")],
    train_questions: Annotated[str, typer.Option(help="Questions to train on, START:END.")] = "250:500",
    val_questions: Annotated[str, typer.Option(help="Held-apart questions for the validation loss, START:END ('' = none).")] = "200:250",
    index_dir: Annotated[Optional[Path], typer.Option("--index", help="Index over the pool: tops lists up to k with retrieved distractors.")] = None,
    llm: Annotated[str, typer.Option(help="In-process LLM spec: local | hf:PATH (it stays frozen unless --lora-r).")] = "local",
    encoder: Annotated[str, typer.Option(help="Retriever encoder for the features (embedded name or path).")] = "minilm",
    k: Annotated[int, typer.Option("--k", "-k", help="Documents per list.")] = 10,
    epochs: Annotated[int, typer.Option()] = 2,
    lr: Annotated[float, typer.Option()] = 2e-4,
    grad_accum: Annotated[int, typer.Option(help="Examples per optimizer step.")] = 4,
    relevance_weight: Annotated[float, typer.Option(help="w in L = L_LM + w L_relevance (0 = without L_relevance).")] = 1.0,
    lm_loss: Annotated[str, typer.Option(help="answer (answer tokens only) | sequence (whole prompt, authors' code).")] = "answer",
    drop: Annotated[list[str], typer.Option("--drop", help="Ablation: zero a feature (r, gamma, zeta); repeatable.")] = [],  # noqa: B006
    doc_words: Annotated[Optional[int], typer.Option(help="Cut each document to N words (CPU budget); default: whole.")] = None,
    template: Annotated[str, typer.Option(help="chat (tokenizer's template) | alpaca (authors' wrapper).")] = "chat",
    placeholder: Annotated[Optional[str], typer.Option(help="Placeholder token (default: chosen for the tokenizer).")] = None,
    max_minutes: Annotated[float, typer.Option(help="Stop after this long (the checkpoint is saved).")] = 30.0,
    max_steps: Annotated[Optional[int], typer.Option(help="Stop after N optimizer steps (default: all epochs).")] = None,
    eval_every: Annotated[int, typer.Option(help="Validation loss every N optimizer steps.")] = 25,
    save_every: Annotated[int, typer.Option(help="Checkpoint every N optimizer steps.")] = 25,
    projection: Annotated[str, typer.Option(help="scaled (default: steps at the embeddings' scale, start at the placeholder) | linear (the authors').")] = "scaled",
    lora_r: Annotated[int, typer.Option(help="> 0: LoRA rank on q_proj/v_proj (the LLM is then tuned too).")] = 0,
    seed: Annotated[int, typer.Option()] = 42,
    resume: Annotated[bool, typer.Option(help="Continue from a checkpoint in --out.")] = True,
    llm_opt: Annotated[list[str], typer.Option("--llm-opt", help="Backend option KEY=VALUE (num_threads, dtype, ...).")] = [],  # noqa: B006
) -> None:
    """R²AG: train R²-Former + projection (L = L_LM + L_relevance) through a frozen LLM; prints validation JSON."""
    from tandem.corpus import load_dataset
    from tandem.index.encoder import load_encoder
    from tandem.index.store import DocStore
    from tandem.llm import load_llm
    from tandem.methods.r2ag.algorithm import embedding_backend
    from tandem.train import r2ag as tr

    with owned_output(out_dir, "r2former"):
        config = tr.R2AGTrainConfig(k=k, epochs=epochs, lr=lr, grad_accum=grad_accum, relevance_weight=relevance_weight,
                                    lm_loss=lm_loss, drop_features=list(drop), template=template, doc_words=doc_words,
                                    placeholder=placeholder, max_minutes=max_minutes, max_steps=max_steps, eval_every=eval_every,
                                    save_every=save_every, seed=seed, lora_r=lora_r,
                                    projection=projection)
        ds = load_dataset(dataset)
        train_qs = ds.questions[parse_slice(train_questions)]
        val_qs = ds.questions[parse_slice(val_questions)] if val_questions else []
        if {q.id for q in train_qs} & {q.id for q in val_qs}:
            raise typer.BadParameter("--train-questions and --val-questions overlap")
        search = None
        if index_dir is not None:
            from tandem.index import open_index
            from tandem.methods.base import Search
            from tandem.retrieve import open_retriever

            idx = open_index(index_dir)
            search = Search(open_retriever(idx), idx.store)
        store = DocStore(ds.passages)
        enc = load_encoder(encoder)
        lists = {name: tr.build_lists(qs, store, enc, k=k, search=search, drop=config.drop_features)
                 for name, qs in (("train", train_qs), ("val", val_qs))}
        from tandem.llm.options import parse_pairs, split_llm_options

        backend_opts, generation = split_llm_options(llm, parse_pairs(llm_opt))
        if generation:
            raise typer.BadParameter(f"training takes backend options only, not {sorted(generation)}")
        backend = embedding_backend(load_llm(llm, **backend_opts))
        if not hasattr(backend, "model"):
            raise typer.BadParameter("training needs an in-process LLM (--llm local or hf:PATH)")
        with progress_bar() as bar:
            log = tr.train_r2ag(backend, lists["train"], lists["val"], out_dir, config, encoder_name=encoder,
                                resume=resume, on_step=bar.training("train r2ag"))
        from tandem.train.r2former import load_r2former

        report = {"dataset": str(dataset), "train_questions": train_questions, "val_questions": val_questions,
                  "train_lists": len(lists["train"]), "val_lists": len(lists["val"]), "steps": log["steps"],
                  "planned_steps": log["planned_steps"], "minutes": log["minutes"], "stopped_early": log["stopped_early"],
                  "val_before": log["val_before"], "val_after": log["val_after"],
                  "val_ranking": tr.ranking_quality(load_r2former(out_dir), lists["val"]) if lists["val"] else None}
        add_file(out_dir, "train_report.json", json.dumps({**report, "log": log}, indent=1))
        typer.echo(json.dumps(report, indent=1))


def register(train_app: typer.Typer) -> None:
    """Add ``r2ag`` to the ``tandem train`` group."""
    train_app.command("r2ag")(train_r2ag_command)
