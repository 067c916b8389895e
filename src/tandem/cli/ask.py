"""``tandem ask``, ``tandem methods`` and ``tandem report``: one question, the registry, comparing runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from tandem.cli.common import (
    CONFIG_HELP,
    JSON_OPTION,
    LLM_OPT_HELP,
    RETRIEVER_HELP,
    RETRIEVER_OPT_HELP,
    console,
    out,
    print_json,
    run_config,
)


def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    config_file: Annotated[Optional[Path], typer.Option("--config", help=CONFIG_HELP)] = None,
    method: Annotated[Optional[str], typer.Option(help="Method name (default: the registry's, tandem methods).")] = None,
    index_dir: Annotated[Optional[Path], typer.Option("--index", help="Index folder.")] = None,
    retriever: Annotated[Optional[str], typer.Option(help=RETRIEVER_HELP)] = None,
    retriever_opt: Annotated[list[str], typer.Option("--retriever-opt", help=RETRIEVER_OPT_HELP)] = [],  # noqa: B006
    llm: Annotated[Optional[str], typer.Option(help="LLM spec: local | hf:PATH | openai:MODEL@URL (default: local)")] = None,
    settings: Annotated[list[str], typer.Option("--set", help="Method setting KEY=VALUE (tandem methods NAME).")] = [],  # noqa: B006
    as_json: Annotated[bool, typer.Option("--json", help="Print the answer and trace as JSON.")] = False,
    r2former: Annotated[Optional[Path], typer.Option(help="Shorthand for --set r2former=PATH (an R²-Former checkpoint folder).")] = None,
    llm_opt: Annotated[list[str], typer.Option("--llm-opt", help=LLM_OPT_HELP)] = [],  # noqa: B006
    expect: Annotated[Optional[str], typer.Option(help="The expected answer: printed beside the answer with whether the answer contains it (normalised).")] = None,
) -> None:
    """Answer one question and show the chain of evidence step by step."""
    from tandem.eval.qa_metrics import cover_match, exact_match
    from tandem.io import check_text
    from tandem.render import render_trace
    from tandem.types import Question

    check_text("question", question)
    if config_file is None and method is None:
        from tandem.registry import METHODS

        method = METHODS.default()
    cfg = run_config(config_file, llm=llm, llm_opt=llm_opt, set_items=settings, retriever=retriever, retriever_opt=retriever_opt,
                     r2former=r2former, method=method, index=index_dir)
    from tandem.eval.run import build_run

    runner_method, _, store = build_run(cfg)
    answer = runner_method.answer(Question("ask", question))
    exact, match = (bool(exact_match(answer.text, [expect])), bool(cover_match(answer.text, [expect]))) if expect else (None, None)
    if as_json:
        out.print_json(json.dumps({**answer.to_dict(), **({"expected": expect, "match": match} if expect else {})},
                                  ensure_ascii=False))
        return
    out.print(render_trace(answer, store))
    if expect:
        verdict = "match (normalised exact match)" if exact else "match (the answer contains it)" if match else "NO MATCH"
        out.print(f"expected: {escape(expect)}  ->  {verdict}", highlight=False)


def report(
    runs: Annotated[list[Path], typer.Argument(help="Run folders to compare.")],
    plot: Annotated[Optional[Path], typer.Option(help="PNG to write (default: report.png in the first run's parent).")] = None,
    metric: Annotated[list[str], typer.Option(help="Metrics to plot.")] = ["em", "f1", "acc"],  # noqa: B006
    partial: Annotated[bool, typer.Option(help="Also unfinished QA runs, summarised over the questions they finished.")] = False,
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """One table (and a PNG bar chart) comparing runs."""
    from tandem.eval.report import load_runs, plot_runs, runs_table

    rows = load_runs(runs, partial=partial)
    if as_json:
        print_json(rows)
    else:
        out.print(runs_table(rows))
    target = plot or runs[0].parent / "report.png"
    plot_runs(rows, metric, target)
    console.print(f"wrote {target}")


