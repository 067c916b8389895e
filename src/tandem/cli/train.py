"""``tandem train NAME`` and ``tandem export sft``: one command per trainer in :data:`tandem.registry.TRAINERS`,
generated from its entry - the options from its settings model (:mod:`tandem.cli.typed`), the help from its doc, what
it shows from its ``summary``. Each trainer's code and settings live in its method's folder; this module names none.

A trainer's entry options read here: ``folder`` (the kind of output folder it writes, :func:`tandem.outdir.owned_output`;
default: the trainer's name), ``replacing`` (whether a run may replace a finished folder; default true), ``out`` (the
help of ``--out``), ``summary(spec, report, out) -> [line | (title, row)]`` (what the command prints; without it, the
report as JSON) and, for ``export sft``, ``export(run_dir, out_dir, metrics, threshold) -> stats`` with ``method``
(the method whose runs it reads)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from tandem.cli.common import console, print_json, print_row, progress_bar
from tandem.cli.typed import options_command
from tandem.outdir import owned_output
from tandem.registry import TRAINERS

export_app = typer.Typer(help="Export data built from run folders.", no_args_is_help=True)
train_app = typer.Typer(help="Fine-tune models.", no_args_is_help=True)


def _runner(name: str) -> Any:
    """``run(spec, out_dir, as_json)`` of ``tandem train NAME``: trainer ``name`` into ``out_dir`` under a progress
    bar, then its summary (or its report as JSON)."""

    def run(spec: Any, out_dir: Path, as_json: bool) -> None:
        entry = TRAINERS.get(name)
        with owned_output(out_dir, entry.options.get("folder", name), replacing=entry.options.get("replacing", True)):
            with progress_bar() as bar:
                report = entry.build(spec, out_dir, bar.training(f"train {name}"))
        summary = entry.options.get("summary")
        if as_json:
            print_json(report)
        elif summary is None:
            typer.echo(json.dumps(report, indent=1))
        else:
            for shown in summary(spec, report, out_dir):
                if isinstance(shown, str):
                    console.print(shown)
                else:
                    print_row(*shown)

    return run


def register_trainers() -> None:
    """Add ``tandem train NAME`` for every registered trainer."""
    for entry in TRAINERS.entries():
        command = options_command(entry.settings, _runner(entry.name), name=f"train {entry.name}", doc=entry.doc,
                                  out_help=entry.options.get("out", "Folder to write."))
        train_app.command(entry.name)(command)


register_trainers()
_SFT = TRAINERS.get("sft")  # ``export sft`` writes the data of ``train sft`` from runs of the method it tunes


@export_app.command("sft")
def export_sft(
    run_dir: Annotated[Path, typer.Argument(help=f"A `tandem eval qa --method {_SFT.options['method']}` run folder.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for one ROLE.jsonl per role (and stats.json).")],
    metric: Annotated[list[str], typer.Option(help="Keep questions where any of these metrics reaches --threshold.")] = ["acc", "em"],  # noqa: B006
    threshold: Annotated[float, typer.Option(help="Score a kept question needs on one of the metrics.")] = 1.0,
) -> None:
    """Per-role chat JSONL (the exact prompt + the model's reply) from correctly answered questions: the data of
    `tandem train sft`."""
    with owned_output(out_dir, "sft-data", replacing=False):
        stats = TRAINERS.get("sft").options["export"](run_dir, out_dir, metric, threshold)
        print_row(f"SFT data from {run_dir} ({stats['correct_questions']}/{stats['questions']} questions kept)",
                  stats["examples"])
        console.print(f"wrote {out_dir}")
