"""What every ``tandem`` command module shares: the two consoles, the progress bar, data loading with its
notes, settings parsing and method assembly."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from tandem.io import ReadStats
from tandem.types import OnProgress

# wide tables when piped to a file; the terminal's width otherwise
console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
out = Console(width=None if sys.stdout.isatty() else 160)


#: Work shorter than this many seconds shows no progress bar.
BAR_DELAY_S = 1.0


class LazyProgress(Progress):
    """A rich ``Progress`` that appears only once its ``with`` block has run ``delay`` seconds: short
    work prints nothing. Tasks and updates before then are kept and shown when it appears."""

    def __init__(self, *columns: Any, delay: float = BAR_DELAY_S, **options: Any) -> None:
        super().__init__(*columns, **options)
        self._delay = delay
        self._guard = threading.Lock()
        self._closed = False
        self._timer: threading.Timer | None = None

    def _appear(self) -> None:
        with self._guard:
            if not self._closed:
                self.start()

    def __enter__(self) -> Self:
        self._timer = threading.Timer(self._delay, self._appear)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._guard:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
            if self.live.is_started:  # never shown: nothing to stop, not even a newline to print
                self.stop()

    def callback(self, description: str) -> OnProgress:
        """An ``on_progress(done, total)`` for library code, drawn as a task named ``description``
        (added at its first report, so a stage that never runs shows no task)."""
        task: list[Any] = []

        def on_progress(done: int, total: int) -> None:
            if not task:
                task.append(self.add_task(description, total=total))
            self.update(task[0], completed=done, total=total)

        return on_progress

    def labelled(self) -> Callable[[str, int, int], None]:
        """A ``progress(label, done, total)`` drawing one task per label (see :meth:`callback`)."""
        callbacks: dict[str, OnProgress] = {}

        def progress(label: str, done: int, total: int) -> None:
            if label not in callbacks:
                callbacks[label] = self.callback(label)
            callbacks[label](done, total)

        return progress

    def training(self, description: str) -> Callable[[int, int, float], None]:
        """An ``on_step(step, total, loss)`` for a training loop: the step count and the last loss."""
        task = self.add_task(description, total=None)

        def on_step(step: int, total: int, loss: float) -> None:
            self.update(task, completed=step, total=total, description=f"{description} loss {loss:.3f}")

        return on_step


def progress_bar(*, delay: float = BAR_DELAY_S, target: Console | None = None) -> LazyProgress:
    """The progress bar every long command shows (on stderr), only for work lasting over ``delay`` s;
    library code reports to it through ``bar.callback(description)``."""
    return LazyProgress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TimeRemainingColumn(), console=target or console, transient=False, delay=delay,
    )


def load_docs(dataset: Path | None, corpus: Path | None, fmt: str | None, skip_bad: bool,
               max_tokens: int, overlap: int) -> list:
    from tandem.corpus import load_corpus

    if (dataset is None) == (corpus is None):
        raise typer.BadParameter("give exactly one of --dataset or --corpus")
    if dataset is not None:
        return load_qa(dataset, fmt, skip_bad).passages
    assert corpus is not None
    stats = ReadStats()
    docs = load_corpus(corpus, format=fmt, skip_bad=skip_bad, max_tokens=max_tokens, overlap=overlap, stats=stats)
    report_skips(stats, skip_bad)
    chunked = sum(1 for d in docs if d.metadata.get("chunk", 0) > 0)
    console.print(f"{corpus}: {len(docs)} passages" + (f" ({chunked} extra from chunking long documents)" if chunked else ""))
    return docs


def load_qa(path: Path, fmt: str | None, skip_bad: bool):
    """Load a QA dataset, printing its notes (skipped records among them) and its size."""
    from tandem.corpus import load_dataset


    ds = load_dataset(path, format=fmt, skip_bad=skip_bad)
    for note in ds.notes:
        console.print(f"[yellow]{note}")
    if skip_bad and not ds.skipped:
        console.print("skipped 0 bad records")
    console.print(f"{ds.path}: {ds.format}, {len(ds.questions)} questions, pool of {len(ds.passages)} passages")
    return ds


def report_skips(stats: ReadStats, skip_bad: bool) -> None:
    if skip_bad:
        first = f"; first: {stats.first_error}" if stats.first_error else ""
        console.print(f"[yellow]skipped {stats.skipped} bad records{first}" if stats.skipped else "skipped 0 bad records")


def print_row(title: str, row: dict) -> None:
    """One metrics row as a table on stdout."""
    table = Table(title=title)
    for col in row:
        table.add_column(col)
    table.add_row(*[f"{v:.4f}" if isinstance(v, float) else str(v) for v in row.values()])
    out.print(table)


def parse_settings(items: list[str]) -> dict:
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


def method_for(method: str, llm_spec: str, index_dir: Path | None, settings: dict, cache: Path | None,
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


def parse_slice(spec: str) -> slice:
    """``START:END`` (either part may be empty) as a slice."""
    start, _, end = spec.partition(":")
    return slice(int(start or 0), int(end) if end else None)

