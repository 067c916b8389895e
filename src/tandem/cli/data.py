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
from tandem.io import ReadStats

data_app = typer.Typer(help="Inspect datasets and corpora.", no_args_is_help=True)


@data_app.command("inspect")
def data_inspect(
    path: Annotated[Path, typer.Argument(help="Dataset, corpus file or folder.")],
    fmt: Annotated[Optional[str], typer.Option("--format", help="Force the format.")] = None,
    skip_bad: Annotated[bool, typer.Option(help="Skip malformed records (counted) instead of stopping.")] = False,
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """Show a file's detected format and what it holds."""
    from tandem.corpus import load_corpus, load_dataset, sniff_format
    from tandem.corpus.formats import QA_FORMATS

    detected = fmt or sniff_format(path)
    if detected in QA_FORMATS:
        ds = load_dataset(path, format=detected, skip_bad=skip_bad)
        with_gold = sum(1 for q in ds.questions if q.gold_doc_ids)
        if as_json:
            print_json({"path": str(path), "format": ds.format, "questions": len(ds.questions), "with_gold": with_gold,
                        "passages": len(ds.passages), "skipped": ds.skipped, "notes": list(ds.notes)})
            return
        out.print(f"format {ds.format}: {len(ds.questions)} questions ({with_gold} with gold passages), "
                  f"pool of {len(ds.passages)} passages")
        for note in ds.notes:
            out.print(note)
    else:
        stats = ReadStats()
        passages = len(load_corpus(path, format=detected, skip_bad=skip_bad, stats=stats))
        if as_json:
            print_json({"path": str(path), "format": detected, "passages": passages, "skipped": stats.skipped})
            return
        out.print(f"format {detected}: {passages} passages")
        report_skips(stats, skip_bad)


