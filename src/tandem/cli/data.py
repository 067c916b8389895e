"""``tandem data inspect``: what a file holds."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tandem.cli.common import (
    JSON_OPTION,
    out,
    print_json,
    report_skips,
)
from tandem.errors import ConfigError
from tandem.io import ReadStats

data_app = typer.Typer(help="Inspect datasets and corpora.", no_args_is_help=True)


@data_app.command("inspect")
def data_inspect(
    path: Annotated[Path, typer.Argument(help="Dataset, corpus file or folder.")],
    fmt: Annotated[Optional[str], typer.Option("--format", help="Force the format.")] = None,
    skip_bad: Annotated[bool, typer.Option(help="Skip malformed records (counted) instead of stopping.")] = False,
    offset: Annotated[int, typer.Option(min=0, help="A dataset's questions: skip the first N (as eval qa --offset).")] = 0,
    limit: Annotated[Optional[int], typer.Option(min=1, help="A dataset's questions: only N (after --offset).")] = None,
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """Show a file's detected format and what it holds; for a dataset, its gold answers' types too (in the
    slice ``--offset`` / ``--limit`` selects, as ``eval qa`` does)."""
    from tandem.config import select_questions
    from tandem.corpus import load_corpus, load_dataset, sniff_format
    from tandem.corpus.formats import QA_FORMATS
    from tandem.eval.judge import answer_type_notes

    detected = fmt or sniff_format(path)
    if detected in QA_FORMATS:
        ds = load_dataset(path, format=detected, skip_bad=skip_bad)
        try:
            questions = select_questions(ds.questions, offset, limit, source=str(path))
        except ConfigError as exc:
            raise typer.BadParameter(str(exc)) from None
        with_gold = sum(1 for q in questions if q.gold_doc_ids)
        answers = answer_type_notes([q.answers for q in questions])
        sliced = f" ({offset}-{offset + len(questions) - 1} of {len(ds.questions)})" if (offset or limit) else ""
        if as_json:
            print_json({"path": str(path), "format": ds.format, "questions": len(questions), "with_gold": with_gold,
                        "answer_types": answers, "passages": len(ds.passages), "skipped": ds.skipped,
                        "notes": list(ds.notes)})
            return
        out.print(f"format {ds.format}: {len(questions)} questions{sliced}, {with_gold} with gold passages, "
                  f"pool of {len(ds.passages)} passages")
        out.print(f"gold answers: {answers or 'none'}")
        for note in ds.notes:
            out.print(note)
    else:
        stats = ReadStats()
        passages = len(load_corpus(path, format=detected, skip_bad=skip_bad, stats=stats))
        if as_json:
            print_json({"path": str(path), "format": detected, "passages": passages, "skipped": stats.skipped,
                        "notes": stats.notes})
            return
        out.print(f"format {detected}: {passages} passages")
        report_skips(stats, skip_bad)


