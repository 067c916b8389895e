"""``tandem eval retrieval`` and ``tandem eval qa``: run folders with metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tandem.cli.common import (
    LLM_OPT_HELP,
    console,
    load_qa,
    method_for,
    parse_settings,
    print_row,
    progress_bar,
)
from tandem.errors import RunError
from tandem.outdir import owned_output
from tandem.secrets import redact

eval_app = typer.Typer(help="Evaluate retrieval or QA methods on a dataset.", no_args_is_help=True)


@eval_app.command("retrieval")
def eval_retrieval(
    dataset: Annotated[Path, typer.Option(help="QA dataset with gold passages.")],
    index_dir: Annotated[Path, typer.Option("--index", help="Index folder.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Run folder to write.")],
    k: Annotated[list[int], typer.Option("--k", help="Cut-offs, e.g. --k 2 5 10.")] = [2, 5, 10],  # noqa: B006
    retriever: Annotated[Optional[str], typer.Option(help="bm25 | dense | hybrid | graph (default: the index's kind).")] = None,
    fusion: Annotated[str, typer.Option(help="Hybrid fusion: rrf | weighted.")] = "rrf",
    retriever_opt: Annotated[list[str], typer.Option("--retriever-opt", help="Retriever setting KEY=VALUE, repeatable (graph: first_stage, seeds, damping, ...).")] = [],  # noqa: B006
    limit: Annotated[Optional[int], typer.Option(help="Only the first N questions.")] = None,
    fmt: Annotated[Optional[str], typer.Option("--format", help="Force the dataset format.")] = None,
    any_corpus: Annotated[bool, typer.Option(help="Allow an index over another corpus (gold ids must be in it).")] = False,
    min_gold_share: Annotated[float, typer.Option(help="Fail when fewer than this share of the gold passage ids are in the index.")] = 0.5,
    skip_bad: Annotated[bool, typer.Option(help="Skip malformed records (counted) instead of stopping.")] = False,
) -> None:
    """Recall@k, all-gold@k, MRR and nDCG@10 of a retriever on a dataset's questions."""
    from tandem.eval.retrieval import check_gold_coverage, evaluate_retrieval
    from tandem.eval.rundir import RunDir
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
        run.write_records("per_question.jsonl", records)
        row = {"retriever": kind, **{m: v for m, v in metrics.items() if isinstance(v, float)}}
        run.write_metrics(metrics, [row], f"Retrieval: {Path(dataset).name} / {kind}")
    print_row(f"{Path(dataset).name} ({metrics['questions']} questions) / {kind}", row)
    console.print(f"wrote {out_dir}")


@eval_app.command("qa")
def eval_qa(
    method: Annotated[str, typer.Option(help="Method name (tandem methods).")],
    dataset: Annotated[Path, typer.Option(help="QA dataset.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Run folder (resumed if it exists).")],
    index_dir: Annotated[Optional[Path], typer.Option("--index", help="Index folder over the dataset's pool.")] = None,
    llm: Annotated[str, typer.Option(help="LLM spec: local | hf:PATH | openai:MODEL@URL")] = "local",
    limit: Annotated[Optional[int], typer.Option(help="Only the first N questions.")] = None,
    concurrency: Annotated[int, typer.Option(help="Questions in flight.")] = 1,
    settings: Annotated[list[str], typer.Option("--set", help="Method hyper-parameter key=value.")] = [],  # noqa: B006
    judge: Annotated[Optional[str], typer.Option(help="LLM spec of the yes/no judge (adds the 'judge' metric).")] = None,
    reanswer: Annotated[bool, typer.Option(help="Score max(raw, re-answered) as DualRAG's evaluation does.")] = False,
    cache: Annotated[bool, typer.Option(help="SQLite response cache in the run folder.")] = True,
    retry_errors: Annotated[bool, typer.Option(help="On resume, run failed questions again.")] = False,
    fmt: Annotated[Optional[str], typer.Option("--format", help="Force the dataset format.")] = None,
    r2former: Annotated[Optional[Path], typer.Option(help="R²-Former checkpoint for --method r2ag (= --set r2former=PATH).")] = None,
    llm_opt: Annotated[list[str], typer.Option("--llm-opt", help=LLM_OPT_HELP)] = [],  # noqa: B006
    skip_bad: Annotated[bool, typer.Option(help="Skip malformed records (counted) instead of stopping.")] = False,
    max_failures: Annotated[int, typer.Option(help="Stop after this many questions in a row cannot reach the LLM server (0 = never).")] = 3,
) -> None:
    """Run a QA method over a dataset: predictions with traces, EM / F1 / cover-acc / judge, cost per question."""
    with owned_output(out_dir, "qa-run", replacing=False):  # before any work, and before the cache file is created
        _eval_qa(method, dataset, out_dir, index_dir, llm, limit, concurrency, settings, judge, reanswer, cache,
                 retry_errors, fmt, r2former, llm_opt, skip_bad, max_failures)


def _eval_qa(method: str, dataset: Path, out_dir: Path, index_dir: Path | None, llm: str, limit: int | None,
             concurrency: int, settings: list[str], judge: str | None, reanswer: bool, cache: bool, retry_errors: bool,
             fmt: str | None, r2former: Path | None, llm_opt: list[str], skip_bad: bool, max_failures: int) -> None:
    from tandem.eval.rundir import RunDir
    from tandem.eval.runner import (
        ERRORS_LOG,
        PREDICTIONS,
        load_done,
        metrics_row,
        run_qa,
    )
    from tandem.llm import load_llm
    from tandem.llm.options import parse_pairs, split_llm_options

    backend_opts, generation = split_llm_options(llm, parse_pairs(llm_opt), method)
    ds = load_qa(dataset, fmt, skip_bad)
    questions = ds.questions[:limit] if limit else ds.questions
    hyper = parse_settings(settings) | generation | ({"r2former": str(r2former)} if r2former else {})
    cache_path = out_dir / "llm-cache.sqlite" if cache else None
    RunDir(out_dir, "qa-run")
    runner_method, main_llm, _ = method_for(method, llm, index_dir, hyper, cache_path, ds.passages, backend_opts)
    judge_llm = (main_llm if judge == llm else load_llm(judge, **({"cache": cache_path} if cache_path else {}))) if judge else None
    config = {"task": "qa", "method": method, "dataset": str(dataset), "format": ds.format,
              "index": str(index_dir) if index_dir else None, "llm": redact(llm), "llm_opts": backend_opts, "hyper": hyper,
              "judge": redact(judge) if judge else None, "reanswer": reanswer, "limit": limit, "concurrency": concurrency}
    with progress_bar() as bar:
        task = bar.add_task(method, total=len(questions))

        def on_record(record: dict, running: dict) -> None:
            em, f1 = running.get("em", 0.0), running.get("f1", 0.0)
            bar.update(task, advance=1, description=f"{method} EM {em:.3f} F1 {f1:.3f} err {running['errors']}")

        bar.update(task, completed=len(set(load_done(out_dir / PREDICTIONS)) & {q.id for q in questions}))
        metrics = run_qa(runner_method, questions, out_dir, config, concurrency=concurrency, judge_llm=judge_llm,
                         reanswer_llm=main_llm if reanswer else None, retry_errors=retry_errors,
                         max_consecutive_failures=max_failures, on_record=on_record)
    print_row(f"{method} on {dataset.name}", metrics_row(metrics))
    console.print(f"wrote {out_dir}")
    if metrics["errors"]:
        where = f"errors in {out_dir / PREDICTIONS}, tracebacks in {out_dir / ERRORS_LOG}"
        if metrics["unreachable"]:
            where += (f"; {metrics['unreachable']} could not reach the LLM server: not saved, they run again "
                      "when the same command is run again")
        if not metrics["answered"]:
            raise RunError(f"every question failed ({metrics['errors']} of {metrics['questions']}); {where}")
        console.print(f"[yellow]{metrics['errors']} of {metrics['questions']} questions failed; {where}")


