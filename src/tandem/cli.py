"""Command line: a thin adapter over the library (``tandem --help``)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from tandem.cli_common import console, out, progress_bar
from tandem.cli_federate import federate_app
from tandem.cli_llm import llm_app
from tandem.cli_r2ag import register as register_r2ag
from tandem.cli_serve import register as register_serve
from tandem.errors import RunError, TandemError
from tandem.io import ReadStats
from tandem.outdir import add_file, owned_output
from tandem.secrets import redact

app = typer.Typer(help="tandem: retrieval-augmented multi-hop QA, retriever and LLM working together.", no_args_is_help=True,
                  pretty_exceptions_show_locals=False)
eval_app = typer.Typer(help="Evaluate retrieval or QA methods on a dataset.", no_args_is_help=True)
data_app = typer.Typer(help="Inspect datasets and corpora.", no_args_is_help=True)
app.add_typer(eval_app, name="eval")
app.add_typer(data_app, name="data")
export_app = typer.Typer(help="Export data built from run folders.", no_args_is_help=True)
app.add_typer(export_app, name="export")
train_app = typer.Typer(help="Fine-tune models.", no_args_is_help=True)
app.add_typer(train_app, name="train")
app.add_typer(federate_app, name="federate")
app.add_typer(llm_app, name="llm")
register_r2ag(train_app)
register_serve(app)


def _load_docs(dataset: Path | None, corpus: Path | None, fmt: str | None, skip_bad: bool,
               max_tokens: int, overlap: int) -> list:
    from tandem.corpus import load_corpus

    if (dataset is None) == (corpus is None):
        raise typer.BadParameter("give exactly one of --dataset or --corpus")
    if dataset is not None:
        return _dataset(dataset, fmt, skip_bad).passages
    assert corpus is not None
    stats = ReadStats()
    docs = load_corpus(corpus, format=fmt, skip_bad=skip_bad, max_tokens=max_tokens, overlap=overlap, stats=stats)
    _report_skips(stats, skip_bad)
    chunked = sum(1 for d in docs if d.metadata.get("chunk", 0) > 0)
    console.print(f"{corpus}: {len(docs)} passages" + (f" ({chunked} extra from chunking long documents)" if chunked else ""))
    return docs


def _dataset(path: Path, fmt: str | None, skip_bad: bool):
    """Load a QA dataset, printing its notes (skipped records among them) and its size."""
    from tandem.corpus import load_dataset

    ds = load_dataset(path, format=fmt, skip_bad=skip_bad)
    for note in ds.notes:
        console.print(f"[yellow]{note}")
    if skip_bad and not ds.skipped:
        console.print("skipped 0 bad records")
    console.print(f"{ds.path}: {ds.format}, {len(ds.questions)} questions, pool of {len(ds.passages)} passages")
    return ds


def _report_skips(stats: ReadStats, skip_bad: bool) -> None:
    if skip_bad:
        first = f"; first: {stats.first_error}" if stats.first_error else ""
        console.print(f"[yellow]skipped {stats.skipped} bad records{first}" if stats.skipped else "skipped 0 bad records")


def _print_row(title: str, row: dict) -> None:
    """One metrics row as a table on stdout."""
    table = Table(title=title)
    for col in row:
        table.add_column(col)
    table.add_row(*[f"{v:.4f}" if isinstance(v, float) else str(v) for v in row.values()])
    out.print(table)


@app.command()
def index(
    out_dir: Annotated[Path, typer.Option("--out", help="Index folder to write (replaced atomically).")],
    dataset: Annotated[Optional[Path], typer.Option(help="QA dataset whose passage pool is indexed.")] = None,
    corpus: Annotated[Optional[Path], typer.Option(help="Corpus JSONL/JSON or a folder of .txt/.md files.")] = None,
    kind: Annotated[str, typer.Option(help="bm25 | dense | hybrid")] = "hybrid",
    encoder: Annotated[str, typer.Option(help="Embedded name (minilm), local path or hub name.")] = "minilm",
    backend: Annotated[Optional[str], typer.Option(help="Encoder backend (default: the fastest available).")] = None,
    faiss_kind: Annotated[str, typer.Option("--faiss", help="flat (exact) | ivf | hnsw")] = "flat",
    fmt: Annotated[Optional[str], typer.Option("--format", help="Force the input format.")] = None,
    skip_bad: Annotated[bool, typer.Option(help="Skip malformed records (counted) instead of stopping.")] = False,
    batch_size: Annotated[int, typer.Option(help="Encoding batch size.")] = 64,
    max_tokens: Annotated[int, typer.Option(help="Chunk size in words: longer documents (text files, corpus records) are split.")] = 200,
    overlap: Annotated[int, typer.Option(help="Words shared by consecutive chunks.")] = 40,
    extras: Annotated[list[str], typer.Option("--extras", help="Per-document arrays to store: rala (CoopRAG's layer features).")] = [],  # noqa: B006
) -> None:
    """Build a BM25, dense or hybrid index folder."""
    from tandem.index import build_index
    from tandem.index.encoder import load_encoder
    from tandem.index.layers import EXTRAS

    unknown = sorted(set(extras) - set(EXTRAS))
    if unknown:
        raise typer.BadParameter(f"unknown extras {unknown}; choose from {sorted(EXTRAS)}")
    with owned_output(out_dir, "index"):  # before any work: a user's folder is refused at once
        docs = _load_docs(dataset, corpus, fmt, skip_bad, max_tokens, overlap)
        start = time.perf_counter()
        enc = load_encoder(encoder, **({"backend": backend} if backend else {})) if kind != "bm25" or extras else encoder
        manifest = build_index(docs, out_dir, kind=kind, encoder=enc, dense_params={"faiss": faiss_kind},
                               batch_size=batch_size, show_progress=True,
                               extras=[EXTRAS[name](show_progress=True) for name in extras])
    console.print(f"[green]indexed {manifest.doc_count} passages ({kind}) into {out_dir} in {time.perf_counter() - start:.1f}s")


@app.command()
def retrieve(
    query: Annotated[str, typer.Argument(help="The query.")],
    index_dir: Annotated[Path, typer.Option("--index", help="Index folder.")],
    k: Annotated[int, typer.Option("-k", help="How many hits.")] = 10,
    retriever: Annotated[Optional[str], typer.Option(help="bm25 | dense | hybrid (default: the index's kind).")] = None,
    fusion: Annotated[str, typer.Option(help="Hybrid fusion: rrf | weighted.")] = "rrf",
) -> None:
    """Print the top-k passages for a query."""
    from tandem.index import open_index
    from tandem.retrieve import open_retriever

    idx = open_index(index_dir)
    options = {"fusion": fusion} if (retriever or idx.kind) == "hybrid" else {}
    hits = open_retriever(idx, retriever, **options).search(query, k)
    table = Table(title=f"{query}", show_lines=False)
    for col in ("rank", "score", "title", "text"):
        table.add_column(col, overflow="fold")
    for hit in hits:
        doc = idx.store.get(hit.doc_id)
        snippet = doc.text if len(doc.text) <= 160 else doc.text[:157] + "..."
        table.add_row(str(hit.rank), f"{hit.score:.4f}", doc.title, snippet)
    out.print(table)


@eval_app.command("retrieval")
def eval_retrieval(
    dataset: Annotated[Path, typer.Option(help="QA dataset with gold passages.")],
    index_dir: Annotated[Path, typer.Option("--index", help="Index folder.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Run folder to write.")],
    k: Annotated[list[int], typer.Option("--k", help="Cut-offs, e.g. --k 2 5 10.")] = [2, 5, 10],  # noqa: B006
    retriever: Annotated[Optional[str], typer.Option(help="bm25 | dense | hybrid (default: the index's kind).")] = None,
    fusion: Annotated[str, typer.Option(help="Hybrid fusion: rrf | weighted.")] = "rrf",
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
        ds = _dataset(dataset, fmt, skip_bad)
        idx = open_index(index_dir, corpus=None if any_corpus else ds.passages)
        questions = ds.questions[:limit] if limit else ds.questions
        coverage = check_gold_coverage(questions, idx.store, min_gold_share, str(index_dir))
        kind = retriever or idx.kind
        ret = open_retriever(idx, kind, **({"fusion": fusion} if kind == "hybrid" else {}))
        with progress_bar() as bar:
            task = bar.add_task(f"retrieval {kind}", total=sum(1 for q in questions if q.gold_doc_ids))
            records, metrics = evaluate_retrieval(questions, ret, k, on_batch=lambda n: bar.advance(task, n))
        metrics["gold_in_index"] = coverage
        run = RunDir(out_dir, "retrieval-run")
        run.write_config({
            "task": "retrieval", "dataset": str(dataset), "format": ds.format, "index": str(index_dir),
            "index_manifest": idx.manifest.__dict__, "retriever": kind, "fusion": fusion if kind == "hybrid" else None,
            "k": list(k), "limit": limit,
        })
        run.write_records("per_question.jsonl", records)
        row = {"retriever": kind, **{m: v for m, v in metrics.items() if isinstance(v, float)}}
        run.write_metrics(metrics, [row], f"Retrieval: {Path(dataset).name} / {kind}")
    _print_row(f"{Path(dataset).name} ({metrics['questions']} questions) / {kind}", row)
    console.print(f"wrote {out_dir}")


def _parse_settings(items: list[str]) -> dict:
    """``--set key=value`` pairs; values are read as JSON where they parse (numbers, booleans), else strings."""
    import json

    settings = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--set expects key=value, got {item!r}")
        try:
            settings[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            settings[key.strip()] = value
    return settings


LLM_OPT_HELP = ("LLM option KEY=VALUE, repeatable: json_mode, timeout, max_retries, max_concurrency, ... "
                "(per backend), temperature, max_tokens[.ROLE]. A wrong key lists the valid ones.")


def _method_for(method: str, llm_spec: str, index_dir: Path | None, settings: dict, cache: Path | None,
                passages: list | None = None, backend_opts: dict | None = None):
    """Build the LLM, open the index (if any) and put the method together (:func:`tandem.compose.build_runnable`)."""
    from tandem.compose import build_runnable
    from tandem.index import open_index
    from tandem.llm import load_llm
    from tandem.methods import NEEDS_INDEX

    if method in NEEDS_INDEX and index_dir is None:
        raise typer.BadParameter(f"method {method!r} retrieves: give --index DIR")
    llm = load_llm(llm_spec, **(backend_opts or {}), **({"cache": cache} if cache else {}))
    index = open_index(index_dir) if index_dir is not None else None
    runnable, store = build_runnable(method, llm, index, settings, passages)
    return runnable, llm, store


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
    from tandem.eval.runner import ERRORS_LOG, PREDICTIONS, load_done, metrics_row, run_qa
    from tandem.llm import load_llm
    from tandem.llm.options import parse_pairs, split_llm_options

    backend_opts, generation = split_llm_options(llm, parse_pairs(llm_opt), method)
    ds = _dataset(dataset, fmt, skip_bad)
    questions = ds.questions[:limit] if limit else ds.questions
    hyper = _parse_settings(settings) | generation | ({"r2former": str(r2former)} if r2former else {})
    cache_path = out_dir / "llm-cache.sqlite" if cache else None
    RunDir(out_dir, "qa-run")
    runner_method, main_llm, _ = _method_for(method, llm, index_dir, hyper, cache_path, ds.passages, backend_opts)
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
    _print_row(f"{method} on {dataset.name}", metrics_row(metrics))
    console.print(f"wrote {out_dir}")
    if metrics["errors"]:
        where = f"errors in {out_dir / PREDICTIONS}, tracebacks in {out_dir / ERRORS_LOG}"
        if metrics["unreachable"]:
            where += (f"; {metrics['unreachable']} could not reach the LLM server: not saved, they run again "
                      "when the same command is run again")
        if not metrics["answered"]:
            raise RunError(f"every question failed ({metrics['errors']} of {metrics['questions']}); {where}")
        console.print(f"[yellow]{metrics['errors']} of {metrics['questions']} questions failed; {where}")


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    method: Annotated[str, typer.Option(help="Method name.")] = "ircot",
    index_dir: Annotated[Optional[Path], typer.Option("--index", help="Index folder.")] = None,
    llm: Annotated[str, typer.Option(help="LLM spec: local | hf:PATH | openai:MODEL@URL")] = "local",
    settings: Annotated[list[str], typer.Option("--set", help="Method hyper-parameter key=value.")] = [],  # noqa: B006
    as_json: Annotated[bool, typer.Option("--json", help="Print the answer and trace as JSON.")] = False,
    r2former: Annotated[Optional[Path], typer.Option(help="R²-Former checkpoint for --method r2ag.")] = None,
    llm_opt: Annotated[list[str], typer.Option("--llm-opt", help=LLM_OPT_HELP)] = [],  # noqa: B006
) -> None:
    """Answer one question and show the chain of evidence step by step."""
    import json

    from tandem.llm.options import parse_pairs, split_llm_options
    from tandem.render import render_trace
    from tandem.types import Question

    backend_opts, generation = split_llm_options(llm, parse_pairs(llm_opt), method)
    hyper = _parse_settings(settings) | generation | ({"r2former": str(r2former)} if r2former else {})
    runner_method, _, store = _method_for(method, llm, index_dir, hyper, None, backend_opts=backend_opts)
    answer = runner_method.answer(Question("ask", question))
    if as_json:
        out.print_json(json.dumps(answer.to_dict(), ensure_ascii=False))
    else:
        out.print(render_trace(answer, store))


@app.command()
def methods(
    name: Annotated[Optional[str], typer.Argument(help="A method: list its settings, types and defaults.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the registered methods, or one method's settings (``--set KEY=VALUE``) with their defaults."""
    import json

    from tandem.methods import METHODS, describe_settings

    if name is None:
        if as_json:
            out.print_json(json.dumps(sorted(METHODS)))
        for method in sorted(METHODS) if not as_json else ():
            out.print(method)
        return
    settings = describe_settings(name)
    if as_json:
        out.print_json(json.dumps({"method": name, "settings": settings}))
        return
    table = Table(title=f"{name}: settings (--set KEY=VALUE)")
    for col in ("setting", "type", "default"):
        table.add_column(col)
    for key, info in settings.items():
        table.add_row(key, escape(str(info["type"])), escape(json.dumps(info["default"])))
    out.print(table)


@app.command()
def report(
    runs: Annotated[list[Path], typer.Argument(help="Run folders to compare.")],
    plot: Annotated[Optional[Path], typer.Option(help="PNG to write (default: report.png in the first run's parent).")] = None,
    metric: Annotated[list[str], typer.Option(help="Metrics to plot.")] = ["em", "f1", "acc"],  # noqa: B006
) -> None:
    """One table (and a PNG bar chart) comparing runs."""
    from tandem.eval.report import load_runs, plot_runs, runs_table

    rows = load_runs(runs)
    out.print(runs_table(rows))
    target = plot or runs[0].parent / "report.png"
    plot_runs(rows, metric, target)
    console.print(f"wrote {target}")


@data_app.command("inspect")
def data_inspect(
    path: Annotated[Path, typer.Argument(help="Dataset, corpus file or folder.")],
    fmt: Annotated[Optional[str], typer.Option("--format", help="Force the format.")] = None,
    skip_bad: Annotated[bool, typer.Option(help="Skip malformed records (counted) instead of stopping.")] = False,
) -> None:
    """Show a file's detected format and what it holds."""
    from tandem.corpus import load_corpus, load_dataset, sniff_format
    from tandem.corpus.formats import QA_FORMATS

    detected = fmt or sniff_format(path)
    if detected in QA_FORMATS:
        ds = load_dataset(path, format=detected, skip_bad=skip_bad)
        with_gold = sum(1 for q in ds.questions if q.gold_doc_ids)
        out.print(f"format {ds.format}: {len(ds.questions)} questions ({with_gold} with gold passages), "
                  f"pool of {len(ds.passages)} passages")
        for note in ds.notes:
            out.print(note)
    else:
        stats = ReadStats()
        out.print(f"format {detected}: {len(load_corpus(path, format=detected, skip_bad=skip_bad, stats=stats))} passages")
        _report_skips(stats, skip_bad)


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
        _print_row(f"SFT data from {run_dir} ({stats['correct_questions']}/{stats['questions']} questions kept)",
                   stats["examples"])
        console.print(f"wrote {out_dir}")


def _slice(spec: str) -> slice:
    start, _, end = spec.partition(":")
    return slice(int(start or 0), int(end) if end else None)


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
    epochs: Annotated[int, typer.Option()] = 2,
    batch_size: Annotated[int, typer.Option()] = 16,
    lr: Annotated[float, typer.Option()] = 2e-5,
    max_minutes: Annotated[float, typer.Option(help="Stop training after this long (the model is saved).")] = 30.0,
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

    with owned_output(out_dir, "retriever"):
        ds = load_dataset(dataset)
        train_qs, eval_qs = ds.questions[_slice(train_questions)], ds.questions[_slice(eval_questions)] if eval_questions else []
        if {q.id for q in train_qs} & {q.id for q in eval_qs}:
            raise typer.BadParameter("--train-questions and --eval-questions overlap")
        store = DocStore(ds.passages)
        unrolled = tr.read_unrollings(unrollings) if unrollings else None
        examples = tr.training_questions(train_qs, store, unrollings=unrolled, parts=query)
        pool = [d.contents for d in ds.passages]
        for extra in extra_dataset:
            more = load_dataset(extra)
            examples += tr.training_questions(more.questions[:extra_limit], DocStore(more.passages), unrollings=unrolled,
                                              parts=query)
            pool += [d.contents for d in more.passages]
        config = tr.TrainConfig(base=base, epochs=epochs, batch_size=batch_size, lr=lr, max_minutes=max_minutes,
                                backward_weight=backward_weight, alpha=alpha, learn_temperature=learn_temperature,
                                max_length=max_length)
        evals = out_dir.parent / f"{out_dir.name}.eval"
        before = tr.recall_on(eval_qs, ds.passages, base, base_index or evals / "base", build=base_index is None) if eval_qs else None
        with progress_bar() as bar:
            task = bar.add_task("train retriever", total=None)

            def on_step(step: int, total: int, loss: float) -> None:
                bar.update(task, completed=step, total=total, description=f"train retriever loss {loss:.3f}")

            log = tr.train_retriever(examples, pool, out_dir, config, on_step)
        after = tr.recall_on(eval_qs, ds.passages, str(out_dir), evals / "tuned") if eval_qs else None
        report = {"dataset": str(dataset), "train_questions": train_questions, "eval_questions": eval_questions,
                  "extra_datasets": [str(p) for p in extra_dataset], "extra_limit": extra_limit, "train_examples": len(examples),
                  "unrollings": str(unrollings) if unrollings else None, "query": query if unrollings else "q",
                  "before": before, "after": after, "train": log}
        add_file(out_dir, "eval.json", json.dumps(report, indent=2))
        if before and after:
            _print_row(f"dense retrieval on questions {eval_questions} (R@2 / R@5, %)",
                       {"base R@2": before["R@2"], "base R@5": before["R@5"], "tuned R@2": after["R@2"],
                        "tuned R@5": after["R@5"], "train minutes": log["minutes"]})
        console.print(f"wrote {out_dir}")


def _expand_multi_value_options(argv: list[str], options: tuple[str, ...] = ("--k",)) -> list[str]:
    """Let ``--k 2 5 10`` mean ``--k 2 --k 5 --k 10`` (click options take one value each)."""
    result: list[str] = []
    multi: str | None = None
    for arg in argv:
        if arg in options:
            multi = arg
        elif multi is not None and arg.isdigit():
            if result[-1] != multi:
                result.append(multi)
        else:
            multi = None
        result.append(arg)
    return result


def _version(value: bool) -> None:
    if value:
        from tandem import __version__

        out.print(f"tandem {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    """tandem: retrieval-augmented multi-hop QA, retriever and LLM working together."""


def main() -> None:
    """Console entry point. Exit codes: 0 success; 1 the work failed (:class:`RunError`, or an unexpected
    error, printed without local variables and with secrets redacted); 2 bad input or settings; 130
    interrupted (Ctrl-C)."""
    import logging

    from tandem.models import offline_env

    offline_env()
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)  # on the handler: libraries that set their own loggers to DEBUG stay quiet
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", handlers=[handler])
    try:
        # non-standalone typer turns Ctrl-C (and click's Exit) into a returned exit code
        code = app(args=_expand_multi_value_options(sys.argv[1:]), prog_name="tandem", standalone_mode=False)
        if code == 130:
            raise KeyboardInterrupt
        if isinstance(code, int) and code:
            raise SystemExit(code)
    except TandemError as exc:
        console.print(f"[red]error:[/red] {escape(redact(str(exc)))}", highlight=False)
        raise SystemExit(exc.exit_code) from None
    except (KeyboardInterrupt, typer.Abort):
        console.print("[red]interrupted[/red]: finished work is saved; run the same command again to resume")
        sys.stdout.flush()
        sys.stderr.flush()
        # not SystemExit: a Ctrl-C that passed through a C extension's PyRun_* call (e.g. during an import)
        # makes CPython 3.11 end the process with SIGINT (-2) even after it was handled; the folders are
        # already cleaned up and unlocked by the context managers the interrupt unwound
        os._exit(130)
    except Exception as exc:  # noqa: BLE001 - the last stop: click's usage errors, then anything unexpected
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            raise SystemExit(exc.exit_code) from None
        import traceback

        sys.stderr.write(redact("".join(traceback.format_exception(exc))))
        console.print(f"[red]internal error:[/red] {escape(redact(f'{type(exc).__name__}: {exc}'))}", highlight=False)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
