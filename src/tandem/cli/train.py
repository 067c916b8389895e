"""``tandem export sft`` and ``tandem train retriever`` (``train r2ag`` lives in ``cli.r2ag``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tandem.cli.common import console, print_json, print_row, progress_bar
from tandem.cli.typed import options_command
from tandem.outdir import owned_output
from tandem.train.specs import RetrieverTrainRun

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


def _train_retriever(spec: Any, out_dir: Path, as_json: bool) -> None:
    """CoopRAG's retriever fine-tuning: difficulty-weighted InfoNCE, in-batch + one hard negative."""
    from tandem.registry import TRAINERS

    with owned_output(out_dir, "retriever"), progress_bar() as bar:
        report = TRAINERS.get("retriever").build(spec, out_dir, bar.training("train retriever"))
    if as_json:
        print_json(report)
        return
    before, after, log = report["before"], report["after"], report["train"]
    if before and after:
        print_row(f"dense retrieval on questions {spec.eval_questions} (R@2 / R@5, %)",
                  {"base R@2": before["R@2"], "base R@5": before["R@5"], "tuned R@2": after["R@2"],
                   "tuned R@5": after["R@5"], "train minutes": log["minutes"]})
        for key in ("rala rrf", "rala none"):
            if key in before:
                print_row(f"dense top-100 + {key} (R@2 / R@5, %)",
                          {"base R@2": before[key]["R@2"], "base R@5": before[key]["R@5"],
                           "tuned R@2": after[key]["R@2"], "tuned R@5": after[key]["R@5"]})
    console.print(f"wrote {out_dir}")


train_app.command("retriever")(options_command(RetrieverTrainRun, _train_retriever, name="train retriever",
                                               doc=_train_retriever.__doc__ or ""))


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
