"""``tandem ask``, ``tandem methods`` and ``tandem report``: one question, the registry, comparing runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from tandem.cli.common import (
    LLM_OPT_HELP,
    console,
    method_for,
    out,
    parse_settings,
)


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
    hyper = parse_settings(settings) | generation | ({"r2former": str(r2former)} if r2former else {})
    runner_method, _, store = method_for(method, llm, index_dir, hyper, None, backend_opts=backend_opts)
    answer = runner_method.answer(Question("ask", question))
    if as_json:
        out.print_json(json.dumps(answer.to_dict(), ensure_ascii=False))
    else:
        out.print(render_trace(answer, store))


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


