"""``tandem export flashrag`` and ``tandem export trec``: run folders in the field's formats."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tandem.cli.common import JSON_OPTION, console, print_json

DATASET_HELP = "The run's dataset (default: the one in its config.json) for metadata and gold passages."


def export_flashrag_command(
    run_dir: Annotated[Path, typer.Argument(help="A `tandem eval qa` run folder.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for intermediate_data.json and metric_score.txt.")],
    index_dir: Annotated[Optional[Path], typer.Option("--index", help="The index the run searched (default: the one in its config.json).")] = None,
    dataset: Annotated[Optional[Path], typer.Option(help=DATASET_HELP)] = None,
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """FlashRAG's intermediate_data.json (id, question, golden_answers, metadata, output: retrieval_result,
    prompt, raw_pred, pred, metric_score) and metric_score.txt."""
    from tandem.eval.export import export_flashrag, index_passages, read_run, run_questions

    run = read_run(run_dir)
    questions = run_questions(run, dataset)
    if questions is None:
        console.print(f"[yellow]the run's dataset {run.config.get('dataset')} is not there: no metadata (give --dataset)")
    stats = export_flashrag(run, out_dir, index_passages(run, index_dir), questions)
    if as_json:
        print_json({"out": str(out_dir), **stats})
    else:
        console.print(f"wrote {out_dir}: {stats['items']} items ({stats['errors']} with errors)")


def export_trec_command(
    run_dir: Annotated[Path, typer.Argument(help="A `tandem eval qa` or `tandem eval retrieval` run folder.")],
    out: Annotated[Path, typer.Option("--out", help="TREC run file to write (qid Q0 docid rank score tag).")],
    qrels: Annotated[Optional[Path], typer.Option(help="Also write the gold passages as qrels here (default: OUT.qrels; '-' = none).")] = None,
    tag: Annotated[Optional[str], typer.Option(help="Run tag (default: tandem-<method or retriever>).")] = None,
    hits: Annotated[str, typer.Option(help="A QA run's list: read (passages shown to the LLM) | retrieved (every hit, first retrieval first).")] = "read",
    dataset: Annotated[Optional[Path], typer.Option(help=DATASET_HELP)] = None,
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """A TREC run file of what each question retrieved, and qrels from the dataset's gold passages."""
    from tandem.eval.export import export_trec, read_run, run_questions

    run = read_run(run_dir)
    qrels_path = None if str(qrels) == "-" else qrels or out.with_name(out.name + ".qrels")
    questions = run_questions(run, dataset) if run.kind == "qa-run" and qrels_path is not None else None
    if run.kind == "qa-run" and qrels_path is not None and questions is None:
        console.print(f"[yellow]the run's dataset {run.config.get('dataset')} is not there: no qrels (give --dataset)")
        qrels_path = None
    stats = export_trec(run, out, qrels=qrels_path, tag=tag, hits=hits, questions=questions)
    if as_json:
        print_json({"out": str(out), "qrels": str(qrels_path) if qrels_path else None, **stats})
    else:
        console.print(f"wrote {out} ({stats['lines']} lines, {stats['questions']} questions)"
                      + (f" and {qrels_path} ({stats['qrels']} gold passages)" if qrels_path else ""))


def register(export_app: typer.Typer) -> None:
    """Add ``flashrag`` and ``trec`` to the ``tandem export`` group."""
    export_app.command("flashrag")(export_flashrag_command)
    export_app.command("trec")(export_trec_command)
