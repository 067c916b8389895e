"""``tandem export sft`` and ``tandem train retriever`` (``train r2ag`` lives in ``cli.r2ag``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tandem.cli.common import (
    console,
    parse_slice,
    print_row,
    progress_bar,
)
from tandem.outdir import add_file, owned_output

export_app = typer.Typer(help="Export data built from run folders.", no_args_is_help=True)
train_app = typer.Typer(help="Fine-tune models.", no_args_is_help=True)


@export_app.command("sft")
def export_sft(
    run_dir: Annotated[Path, typer.Argument(help="A `tandem eval qa --method dualrag` run folder.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for reasoner/entity_identifier/summarizer/answer.jsonl.")],
    metric: Annotated[list[str], typer.Option(help="Keep questions where any of these metrics reaches --threshold.")] = ["acc", "em"],  # noqa: B006
    threshold: Annotated[float, typer.Option(help="Score a kept question needs on one of the metrics.")] = 1.0,
) -> None:
    """Per-role chat JSONL (the exact prompt + the model's reply) from correctly answered questions."""
    from tandem.train.sft_export import export_sft as run_export

    with owned_output(out_dir, "sft-data", replacing=False):
        stats = run_export(run_dir, out_dir, metric, threshold)
        print_row(f"SFT data from {run_dir} ({stats['correct_questions']}/{stats['questions']} questions kept)",
                   stats["examples"])
        console.print(f"wrote {out_dir}")


@train_app.command("retriever")
def train_retriever(
    dataset: Annotated[Path, typer.Option(help="QA dataset with gold passages (its pool gives the negatives).")],
    out_dir: Annotated[Path, typer.Option("--out", help="Model folder to write (sentence-transformers format).")],
    train_questions: Annotated[str, typer.Option(help="Questions to train on, START:END.")] = "250:500",
    eval_questions: Annotated[Optional[str], typer.Option(help="Held-apart questions for R@2/R@5 before/after ('' = skip).")] = "0:250",
    base: Annotated[str, typer.Option(help="Encoder to start from.")] = "minilm",
    extra_dataset: Annotated[list[Path], typer.Option(help="More training data: the questions of these datasets.")] = [],  # noqa: B006
    extra_limit: Annotated[Optional[int], typer.Option(help="Only the first N questions of each --extra-dataset.")] = None,
    base_index: Annotated[Optional[Path], typer.Option(help="Dense index of --dataset's pool built with --base (skips rebuilding it).")] = None,
    unrollings: Annotated[Optional[Path], typer.Option(help="Unrolling cache JSONL (id, sub_questions, chain): train on U.")] = None,
    query: Annotated[str, typer.Option(help="Parts of U with --unrollings: q | q+s | q+r | q+s+r.")] = "q+s+r",
    score: Annotated[str, typer.Option(help="Score inside the InfoNCE logit: rala (the paper's: RaLa's w * avg MaxSim "
                                            "from the encoder's layers) | cosine (sentence embeddings).")] = "rala",
    eval_pool: Annotated[str, typer.Option(help="Passages the held-apart questions search: all (the dataset's pool) | "
                                                "own (only their own context passages: smaller, cheaper to index).")] = "all",
    eval_rala: Annotated[bool, typer.Option(help="Also evaluate dense top-100 + RaLa reranking before/after (the "
                                                 "tuned index then stores RaLa's features: a few minutes more).")] = False,
    epochs: Annotated[int, typer.Option()] = 2,
    batch_size: Annotated[int, typer.Option()] = 16,
    lr: Annotated[float, typer.Option()] = 2e-5,
    max_minutes: Annotated[float, typer.Option(help="Stop training after this long (the model is saved).")] = 30.0,
    max_steps: Annotated[Optional[int], typer.Option(help="Stop training after this many steps (the model is saved).")] = None,
    backward_weight: Annotated[float, typer.Option(help="Weight of the document->query term (0 = off).")] = 1.0,
    alpha: Annotated[bool, typer.Option(help="Difficulty weights ln(1+|S|).")] = True,
    learn_temperature: Annotated[bool, typer.Option(help="Learnable temperature (init 0.05).")] = True,
    max_length: Annotated[int, typer.Option(help="Token limit of queries and passages.")] = 256,
) -> None:
    """CoopRAG's retriever fine-tuning: difficulty-weighted InfoNCE, in-batch + one hard negative."""
    import json

    from tandem.corpus import load_dataset
    from tandem.index.store import DocStore
    from tandem.train import retriever as tr
    from tandem.train.scores import SCORES

    with owned_output(out_dir, "retriever"):
        ds = load_dataset(dataset)
        train_qs, eval_qs = ds.questions[parse_slice(train_questions)], ds.questions[parse_slice(eval_questions)] if eval_questions else []
        if {q.id for q in train_qs} & {q.id for q in eval_qs}:
            raise typer.BadParameter("--train-questions and --eval-questions overlap")
        store = DocStore(ds.passages)
        if eval_pool not in ("all", "own"):
            raise typer.BadParameter(f"--eval-pool must be all or own, not {eval_pool!r}")
        if score not in SCORES:
            raise typer.BadParameter(f"--score must be one of {list(SCORES)}, not {score!r}")
        unrolled = tr.read_unrollings(unrollings) if unrollings else None
        examples = tr.training_questions(train_qs, store, unrollings=unrolled, parts=query)
        pool = [d.contents for d in ds.passages]
        for extra in extra_dataset:
            more = load_dataset(extra)
            examples += tr.training_questions(more.questions[:extra_limit], DocStore(more.passages), unrollings=unrolled,
                                              parts=query)
            pool += [d.contents for d in more.passages]
        if unrolled is not None and not any(x.n_sub_source == "unrolled" for x in examples):
            raise typer.BadParameter(f"--unrollings {unrollings}: no training question has an unrolling with sub-questions")
        config = tr.TrainConfig(base=base, score=score, epochs=epochs, batch_size=batch_size, lr=lr, max_minutes=max_minutes, max_steps=max_steps,
                                backward_weight=backward_weight, alpha=alpha, learn_temperature=learn_temperature,
                                max_length=max_length)
        evals = out_dir.parent / f"{out_dir.name}.eval"
        own = {d for q in eval_qs for d in (*q.metadata.get("context_ids", []), *q.gold_doc_ids)}
        eval_docs = [d for d in ds.passages if eval_pool == "all" or d.id in own]
        before = tr.recall_on(eval_qs, eval_docs, base, base_index or evals / "base", build=base_index is None,
                              rala=eval_rala) if eval_qs else None
        with progress_bar() as bar:
            log = tr.train_retriever(examples, pool, out_dir, config, bar.training("train retriever"))
        after = tr.recall_on(eval_qs, eval_docs, str(out_dir), evals / "tuned", rala=eval_rala) if eval_qs else None
        report = {"dataset": str(dataset), "train_questions": train_questions, "eval_questions": eval_questions,
                  "extra_datasets": [str(p) for p in extra_dataset], "extra_limit": extra_limit, "train_examples": len(examples),
                  "eval_pool": eval_pool, "eval_passages": len(eval_docs),
                  "unrollings": str(unrollings) if unrollings else None, "query": query if unrollings else "q",
                  "before": before, "after": after, "train": log}
        add_file(out_dir, "eval.json", json.dumps(report, indent=2))
        if before and after:
            print_row(f"dense retrieval on questions {eval_questions} (R@2 / R@5, %)",
                       {"base R@2": before["R@2"], "base R@5": before["R@5"], "tuned R@2": after["R@2"],
                        "tuned R@5": after["R@5"], "train minutes": log["minutes"]})
            for key in ("rala rrf", "rala none"):
                if key in before:
                    print_row(f"dense top-100 + {key} (R@2 / R@5, %)",
                              {"base R@2": before[key]["R@2"], "base R@5": before[key]["R@5"],
                               "tuned R@2": after[key]["R@2"], "tuned R@5": after[key]["R@5"]})
        console.print(f"wrote {out_dir}")




@train_app.command("sft")
def train_sft(
    data_dir: Annotated[Path, typer.Argument(help="A `tandem export sft` folder (ROLE.jsonl chat examples).")],
    out_dir: Annotated[Path, typer.Option("--out", help="Model folder (loads as hf:FOLDER; per-role: FOLDER/ROLE). Re-running continues it.")],
    llm: Annotated[str, typer.Option(help="Base model: local | hf:PATH.")] = "local",
    roles: Annotated[str, typer.Option(help="Comma-separated roles to train on.")] = "reasoner,entity_identifier,summarizer,answer",
    per_role: Annotated[bool, typer.Option("--per-role/--merged", help="One model per role, or one over all roles.")] = False,
    lora_r: Annotated[int, typer.Option(help="LoRA rank.")] = 16,
    lora_alpha: Annotated[int, typer.Option(help="LoRA alpha (scale alpha / r).")] = 32,
    lr: Annotated[float, typer.Option(help="AdamW learning rate.")] = 2e-4,
    epochs: Annotated[int, typer.Option(help="Passes over the examples.")] = 1,
    max_steps: Annotated[Optional[int], typer.Option(help="Stop after N optimizer steps (default: all epochs).")] = None,
    max_minutes: Annotated[float, typer.Option(help="Stop after this long (checkpoint and model are saved; re-run to continue).")] = 30.0,
    batch_size: Annotated[int, typer.Option(help="Examples per optimizer step.")] = 4,
    save_every: Annotated[int, typer.Option(help="Checkpoint every N optimizer steps.")] = 10,
    max_length: Annotated[int, typer.Option(help="Skip examples longer than this many tokens.")] = 4096,
    seed: Annotated[int, typer.Option()] = 42,
    llm_opt: Annotated[list[str], typer.Option("--llm-opt", help="Backend option KEY=VALUE (num_threads, dtype, ...).")] = [],  # noqa: B006
) -> None:
    """DualRAG-FT: LoRA fine-tuning on the roles' chat examples (loss on the reply only), merged into the base."""
    from tandem.llm.options import parse_pairs, split_llm_options
    from tandem.train.sft import SFTSettings
    from tandem.train.sft import train_sft as run_sft

    settings = SFTSettings.from_dict({
        "roles": [r.strip() for r in roles.split(",") if r.strip()], "mode": "per-role" if per_role else "merged",
        "lora_r": lora_r, "lora_alpha": lora_alpha, "lr": lr, "epochs": epochs, "max_steps": max_steps,
        "max_minutes": max_minutes, "batch_size": batch_size, "save_every": save_every, "max_length": max_length,
        "seed": seed}, where="tandem train sft")
    backend_opts, generation = split_llm_options(llm, parse_pairs(llm_opt))
    if generation:
        raise typer.BadParameter(f"training takes backend options only, not {sorted(generation)}")
    with owned_output(out_dir, "sft-model", replacing=False), progress_bar() as bar:
        log = run_sft(data_dir, llm, out_dir, settings, llm_opts=backend_opts, progress=bar.training)
    models = log["roles"] if settings.mode == "per-role" else {"+".join(settings.roles): log}
    for name, entry in models.items():
        if "skipped" in entry:
            console.print(f"{name}: skipped ({entry['skipped']})")
            continue
        state = ("already finished; nothing to do" if entry.get("already_finished") else
                 "finished" if entry["finished"] else f"stopped ({entry['stopped_early']}); re-run to continue")
        console.print(f"{name}: {entry['steps']}/{entry['planned_steps']} steps, {entry['examples']} examples, "
                      f"{entry['minutes']} min: {state}")
    console.print(f"wrote {out_dir} (load with --llm hf:{out_dir}{'/ROLE' if per_role else ''})")
