"""``tandem eval retrieval`` and ``tandem eval qa``: run folders with metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tandem.cli.common import (
    CONFIG_HELP,
    JSON_OPTION,
    LLM_OPT_HELP,
    PRESET_HELP,
    RETRIEVER_HELP,
    RETRIEVER_OPT_HELP,
    console,
    load_qa,
    parse_settings,
    print_json,
    print_row,
    progress_bar,
    run_config,
)
from tandem.config import RunConfig
from tandem.errors import RunError
from tandem.outdir import owned_output

eval_app = typer.Typer(help="Evaluate retrieval or QA methods on a dataset.", no_args_is_help=True)


@eval_app.command("retrieval")
def eval_retrieval(
    dataset: Annotated[Path, typer.Option(help="QA dataset with gold passages.")],
    index_dir: Annotated[Path, typer.Option("--index", help="Index folder.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Run folder to write.")],
    k: Annotated[list[int], typer.Option("--k", "-k", help="Cut-offs, e.g. --k 2 5 10.")] = [2, 5, 10],  # noqa: B006
    retriever: Annotated[Optional[str], typer.Option(help="bm25 | dense | hybrid | graph (default: the index's kind).")] = None,
    fusion: Annotated[str, typer.Option(help="Hybrid fusion: rrf | weighted.")] = "rrf",
    retriever_opt: Annotated[list[str], typer.Option("--retriever-opt", help="Retriever setting KEY=VALUE, repeatable (graph: first_stage, seeds, damping, ...).")] = [],  # noqa: B006
    limit: Annotated[Optional[int], typer.Option(help="Only the first N questions.")] = None,
    fmt: Annotated[Optional[str], typer.Option("--format", help="Force the dataset format.")] = None,
    any_corpus: Annotated[bool, typer.Option(help="Allow an index over another corpus (gold ids must be in it).")] = False,
    min_gold_share: Annotated[float, typer.Option(help="Fail when fewer than this share of the gold passage ids are in the index.")] = 0.5,
    skip_bad: Annotated[bool, typer.Option(help="Skip malformed records (counted) instead of stopping.")] = False,
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """Recall@k, all-gold@k, MRR and nDCG@10 of a retriever on a dataset's questions."""
    from tandem.eval.retrieval import check_gold_coverage, evaluate_retrieval
    from tandem.eval.rundir import PER_QUESTION, RunDir
    from tandem.index import open_index
    from tandem.retrieve import open_retriever

    with owned_output(out_dir, "retrieval-run", replacing=False):  # before any work
        ds = load_qa(dataset, fmt, skip_bad)
        idx = open_index(index_dir, corpus=None if any_corpus else ds.passages)
        questions = ds.questions[:limit] if limit else ds.questions
        coverage = check_gold_coverage(questions, idx.store, min_gold_share, str(index_dir))
        kind = retriever or idx.kind
        options = ({"fusion": fusion} if kind in ("hybrid", "graph") else {}) | parse_settings(retriever_opt)
        ret = open_retriever(idx, kind, **options)
        with progress_bar() as bar:
            task = bar.add_task(f"retrieval {kind}", total=sum(1 for q in questions if q.gold_doc_ids))
            records, metrics = evaluate_retrieval(questions, ret, k, on_batch=lambda n: bar.advance(task, n))
        metrics["gold_in_index"] = coverage
        run = RunDir(out_dir, "retrieval-run")
        run.write_config({
            "task": "retrieval", "dataset": str(dataset), "format": ds.format, "index": str(index_dir),
            "index_manifest": idx.manifest.__dict__, "retriever": kind, "fusion": fusion if kind in ("hybrid", "graph") else None,
            "retriever_options": options,
            "k": list(k), "limit": limit,
        })
        run.write_records(PER_QUESTION, records)
        row = {"retriever": kind, **{m: v for m, v in metrics.items() if isinstance(v, float)}}
        run.write_metrics(metrics, [row], f"Retrieval: {Path(dataset).name} / {kind}")
    if as_json:
        print_json(metrics)
    else:
        print_row(f"{Path(dataset).name} ({metrics['questions']} questions) / {kind}", row)
    console.print(f"wrote {out_dir}")


@eval_app.command("qa")
def eval_qa(
    out_dir: Annotated[Path, typer.Option("--out", help="Run folder (resumed if it exists).")],
    config_file: Annotated[Optional[Path], typer.Option("--config", help=CONFIG_HELP)] = None,
    preset: Annotated[Optional[str], typer.Option(help=PRESET_HELP)] = None,
    method: Annotated[Optional[str], typer.Option(help="Method name (tandem methods).")] = None,
    dataset: Annotated[Optional[Path], typer.Option(help="QA dataset.")] = None,
    index_dir: Annotated[Optional[Path], typer.Option("--index", help="Index folder over the dataset's pool.")] = None,
    retriever: Annotated[Optional[str], typer.Option(help=RETRIEVER_HELP)] = None,
    fusion: Annotated[Optional[str], typer.Option(help="Hybrid fusion: rrf | weighted.")] = None,
    retriever_opt: Annotated[list[str], typer.Option("--retriever-opt", help=RETRIEVER_OPT_HELP)] = [],  # noqa: B006
    llm: Annotated[Optional[str], typer.Option(help="LLM spec: local | hf:PATH | openai:MODEL@URL (default: local)")] = None,
    offset: Annotated[Optional[int], typer.Option(help="Skip the first N questions (a held-out slice).")] = None,
    limit: Annotated[Optional[int], typer.Option(help="Only the first N questions (after --offset).")] = None,
    concurrency: Annotated[Optional[int], typer.Option(help="Questions in flight (default 1).")] = None,
    settings: Annotated[list[str], typer.Option("--set", help="Method setting KEY=VALUE (tandem methods NAME).")] = [],  # noqa: B006
    judge: Annotated[Optional[str], typer.Option(help="LLM spec of the yes/no judge (adds the 'judge' metric).")] = None,
    reanswer: Annotated[Optional[bool], typer.Option("--reanswer/--no-reanswer", help="Score max(raw, re-answered) as DualRAG's evaluation does.")] = None,
    reanswer_prompt: Annotated[Optional[str], typer.Option(help="Re-answer prompt: brief | answer_type (the DualRAG authors' kind).")] = None,
    judge_calibration: Annotated[Optional[int], typer.Option(help="Questions the judge is calibrated on before its column is trusted (default 100; 0 = none).")] = None,
    cache: Annotated[Optional[bool], typer.Option("--cache/--no-cache", help="SQLite response cache in the run folder (default on).")] = None,
    retry_errors: Annotated[bool, typer.Option(help="On resume, run failed questions again.")] = False,
    allow_code_change: Annotated[bool, typer.Option(help="Resume although the method's code changed since the saved answers (recorded in code.json).")] = False,
    fmt: Annotated[Optional[str], typer.Option("--format", help="Force the dataset format.")] = None,
    r2former: Annotated[Optional[Path], typer.Option(help="Shorthand for --set r2former=PATH (an R²-Former checkpoint folder).")] = None,
    llm_opt: Annotated[list[str], typer.Option("--llm-opt", help=LLM_OPT_HELP)] = [],  # noqa: B006
    skip_bad: Annotated[bool, typer.Option(help="Skip malformed records (counted) instead of stopping.")] = False,
    max_failures: Annotated[int, typer.Option(help="Stop after this many questions in a row cannot reach the LLM server (0 = never).")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="Print the metrics as JSON on stdout.")] = False,
) -> None:
    """Run a QA method over a dataset: predictions with traces, EM / F1 / cover-acc / judge, cost per question."""
    cfg = run_config(config_file, llm=llm, llm_opt=llm_opt, set_items=settings, retriever=retriever, fusion=fusion, retriever_opt=retriever_opt, preset=preset,
                     r2former=r2former, method=method, dataset=dataset, index=index_dir, limit=limit,
                     offset=offset, concurrency=concurrency, judge=judge, reanswer=reanswer, reanswer_prompt=reanswer_prompt,
                     judge_calibration=judge_calibration, cache=cache, format=fmt)
    if cfg.dataset is None:
        raise typer.BadParameter("give --dataset FILE (or dataset: in --config)")
    with owned_output(out_dir, "qa-run", replacing=False):  # before any work, and before the cache file is created
        _eval_qa(cfg, out_dir, retry_errors, allow_code_change, skip_bad, max_failures, as_json)


def _eval_qa(cfg: RunConfig, out_dir: Path, retry_errors: bool, allow_code_change: bool, skip_bad: bool,
             max_failures: int, as_json: bool) -> None:
    from tandem.eval.run import evaluate
    from tandem.eval.runner import ERRORS_LOG, PREDICTIONS, load_done, metrics_row

    assert cfg.dataset is not None
    ds = load_qa(Path(cfg.dataset), cfg.format, skip_bad)
    questions = cfg.select(ds.questions)
    with progress_bar() as bar:
        task = bar.add_task(cfg.method, total=len(questions))

        def on_record(record: dict, running: dict) -> None:
            em, f1 = running.get("em", 0.0), running.get("f1", 0.0)
            bar.update(task, advance=1, description=f"{cfg.method} EM {em:.3f} F1 {f1:.3f} err {running['errors']}")

        if (out_dir / PREDICTIONS).is_file():
            bar.update(task, completed=len(set(load_done(out_dir / PREDICTIONS)) & {q.id for q in questions}))
        metrics = evaluate(cfg, out_dir, retry_errors=retry_errors, allow_code_change=allow_code_change, skip_bad=skip_bad, max_failures=max_failures,
                           on_record=on_record, dataset=ds)
    if as_json:
        print_json(metrics)
    else:
        print_row(f"{cfg.method} on {Path(cfg.dataset).name}", metrics_row(metrics))
    console.print(f"wrote {out_dir}")
    for change in metrics.get("code_changes", []):
        console.print(f"[yellow]answers after the first {change['after_questions']} came from changed code "
                      f"({', '.join(change['files'])})")
    if metrics["errors"]:
        where = f"errors in {out_dir / PREDICTIONS}, tracebacks in {out_dir / ERRORS_LOG}"
        if metrics["unreachable"]:
            where += (f"; {metrics['unreachable']} could not reach the LLM server: not saved, they run again "
                      "when the same command is run again")
        if not metrics["answered"]:
            raise RunError(f"every question failed ({metrics['errors']} of {metrics['questions']}); {where}")
        console.print(f"[yellow]{metrics['errors']} of {metrics['questions']} questions failed; {where}")
