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

from tandem.interrupts import check as check_stop
from tandem.io import ReadStats
from tandem.types import OnProgress

# wide tables when piped to a file; the terminal's width otherwise
console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
out = Console(width=None if sys.stdout.isatty() else 160)


JSON_OPTION = typer.Option("--json", help="Print the result as JSON on stdout (notes stay on stderr).")


def print_json(value: object) -> None:
    """A result as JSON on stdout."""
    import json

    out.print_json(json.dumps(value, ensure_ascii=False, default=str))


def set_verbosity(level: int) -> None:
    """-1 (``-q``): stderr's notes and progress bars off, results and errors only; 0: tandem's notes and bars,
    third-party libraries quiet; 1 (``-v``): third-party logs, warnings and bars too."""
    import logging

    console.quiet = level < 0
    logging.getLogger().setLevel(logging.INFO if level > 0 else logging.WARNING)
    for handler in logging.getLogger().handlers:
        handler.setLevel(logging.DEBUG if level > 0 else logging.WARNING)


#: Work shorter than this many seconds shows no progress bar.
BAR_DELAY_S = 1.0
#: Where stderr is no terminal (a log file), progress is a plain line per task at most this often.
LINE_EVERY_S = 30.0


def _count(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, sec = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{sec:02d}"


class LazyProgress(Progress):
    """A rich ``Progress`` that appears only once its ``with`` block has run ``delay`` seconds: short
    work prints nothing. Tasks and updates before then are kept and shown when it appears. Where the
    console is no interactive terminal (output sent to a log file, where a live bar would only show at the end), each
    task is a plain line instead - ``label: done/total (pct) elapsed, ~left`` - at most every ``line_every``
    seconds, and when it completes."""

    def __init__(self, *columns: Any, delay: float = BAR_DELAY_S, line_every: float = LINE_EVERY_S,
                 **options: Any) -> None:
        super().__init__(*columns, **options)
        self._delay, self._line_every = delay, line_every
        self._guard = threading.Lock()
        self._closed = False
        self._plain = False  # lines rather than a live bar (set when it appears)
        self._lines: dict[Any, tuple[float, float]] = {}  # task -> (time, completed) of its last line
        self._since: dict[Any, tuple[float, float]] = {}  # task -> (time, completed) of its first line
        self._timer: threading.Timer | None = None

    def _appear(self) -> None:
        with self._guard:
            if self._closed:
                return
            if self.console.is_interactive:  # a terminal that redraws (not TERM=dumb)
                self.start()
                return
            self._plain = True
        for task in self.tasks:
            self._line(task.id)

    def update(self, task_id: Any, **changes: Any) -> None:
        """As rich's, plus the task's plain line where the console is no terminal; a stop signal whose
        interrupt was lost is raised here (:func:`tandem.interrupts.check`)."""
        check_stop()
        super().update(task_id, **changes)
        if self._plain:
            self._line(task_id)

    def advance(self, task_id: Any, advance: float = 1) -> None:
        """As rich's, plus the task's plain line where the console is no terminal (and :meth:`update`'s check)."""
        check_stop()
        super().advance(task_id, advance)
        if self._plain:
            self._line(task_id)

    def _line(self, task_id: Any, *, final: bool = False) -> None:
        with self._lock:
            task = self._tasks.get(task_id)
        if task is None or not task.visible or not task.completed:
            return  # nothing done yet: no line
        now, done = self.get_time(), task.total is not None and task.completed >= task.total
        with self._guard:
            at, last = self._lines.get(task_id, (float("-inf"), -1.0))
            if last == task.completed and (done or final):
                return  # this state has its line
            if not (done or final) and now - at < self._line_every:
                return
            self._lines[task_id] = (now, task.completed)
            t0, c0 = self._since.setdefault(task_id, (now, task.completed))
        total = f"/{_count(task.total)} ({task.percentage:.0f} %)" if task.total else ""
        # the rate since its first line: rich's estimate looks at the last 30 s only, empty for slow work
        rate = (task.completed - c0) / (now - t0) if task.completed > c0 and now > t0 else None
        remaining = (task.total - task.completed) / rate if rate and task.total else None
        left = "" if done or not task.total else f", ~{_clock(remaining)} left"
        self.console.out(f"{task.description}: {_count(task.completed)}{total} {_clock(task.elapsed)} elapsed{left}",
                         highlight=False)

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
        if self._plain:
            for task in self.tasks:
                self._line(task.id, final=True)

    def callback(self, description: str) -> OnProgress:
        """An ``on_progress(done, total)`` for library code, drawn as a task named ``description``
        (added at its first report, so a stage that never runs shows no task)."""
        task: list[Any] = []

        def on_progress(done: int, total: int) -> None:
            size = total or None  # 0: not known (a streamed corpus)
            if not task:
                task.append(self.add_task(description, total=size))
            self.update(task[0], completed=done, total=size)

        return on_progress

    def labelled(self) -> Callable[[str, int, int], None]:
        """A ``progress(label, done, total)`` drawing one task per label (see :meth:`callback`)."""
        callbacks: dict[str, OnProgress] = {}

        def progress(label: str, done: int, total: int) -> None:
            if label not in callbacks:
                callbacks[label] = self.callback(label)
            callbacks[label](done, total)

        return progress

    def training(self, description: str) -> TrainingProgress:
        """An ``on_step(step, total, loss)`` for a training loop: the step count and the last loss; its
        ``stage(label)`` draws the work before the first step (building examples) as a task of its own."""
        return TrainingProgress(self, description)


class TrainingProgress:
    """A training loop's ``on_step(step, total, loss)`` on a :class:`LazyProgress`, and ``stage(label)``: an
    ``on_progress(done, total)`` for what the trainer prepares before its first step (a trainer's library
    code asks for it with ``getattr(on_step, "stage", None)``, so a plain function stays a valid ``on_step``)."""

    def __init__(self, bar: LazyProgress, description: str) -> None:
        self._bar, self._description = bar, description
        self._task = bar.add_task(description, total=None)

    def __call__(self, step: int, total: int, loss: float) -> None:
        self._bar.update(self._task, completed=step, total=total, description=f"{self._description} loss {loss:.3f}")

    def stage(self, label: str) -> OnProgress:
        """Progress of one preparation stage, drawn as the task ``label``."""
        return self._bar.callback(label)


def progress_bar(*, delay: float = BAR_DELAY_S, line_every: float = LINE_EVERY_S,
                 target: Console | None = None) -> LazyProgress:
    """The progress bar every long command shows (on stderr), only for work lasting over ``delay`` s;
    library code reports to it through ``bar.callback(description)``."""
    return LazyProgress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TimeRemainingColumn(), console=target or console, transient=False, delay=delay,
        line_every=line_every,
    )


def load_docs(dataset: Path | None, corpus: Path | None, fmt: str | None, skip_bad: bool,
               max_tokens: int, overlap: int) -> list:
    """The passages of ``--dataset`` (its pool) or of ``--corpus`` (exactly one of them; a corpus's long documents
    cut into chunks of ``max_tokens`` with ``overlap``), bad records skipped and counted where ``skip_bad``."""
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
    """What a read left out: its notes (a folder's files of other kinds), then the bad records skipped."""
    for note in stats.notes:
        console.print(f"[yellow]{note}")
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
    """``--set key=value`` pairs; values are read as JSON where they parse (numbers, booleans), else strings
    (:func:`tandem.llm.options.parse_pairs`, the one parser of ``KEY=VALUE`` options)."""
    from tandem.llm.options import parse_pairs

    return parse_pairs(items, "--set")


WARM_UP_HELP = ("At start, compute what every prompt of the default method's roles begins with, where the LLM keeps it "
                "(the embedded engine's prefix cache): the first question is spared it.")
LLM_OPT_HELP = ("LLM option KEY=VALUE, repeatable: json_mode, timeout, max_retries, max_concurrency, ... "
                "(per backend), temperature, max_tokens[.ROLE]. A wrong key lists the valid ones.")


PRESET_HELP = ("A named set-up under the config file and the other options: paper = each paper's own protocol "
               "(DualRAG's baselines: BM25 top-50 -> bi-encoder -> top-10; CoopRAG's RaLa as published; re-answer "
               "where DualRAG's evaluation applies it; the run's LLM as a calibrated judge).")
CONFIG_HELP = ("Run config, YAML or JSON (a run folder's config.json re-runs that run); options given on the "
               "command line override it.")
RETRIEVER_HELP = ("Retriever over the index: bm25 | dense | hybrid | graph (default: graph where the index has the graph "
                  "extra, else the index's kind; under --preset paper the index's kind).")
RETRIEVER_OPT_HELP = ("Retriever setting KEY=VALUE, repeatable (graph: first_stage, seeds, damping, iterations, "
                      "fusion_weight, two_hop, ...).")


def run_config(config_file: Path | None, *, llm: str | None = None, llm_opt: list[str] = (),  # type: ignore[assignment]
               set_items: list[str] = (), retriever: str | None = None, fusion: str | None = None,  # type: ignore[assignment]
               retriever_opt: list[str] = (),  # type: ignore[assignment]
               preset: str | None = None,
               r2former: Path | None = None, **fields: object):
    """The run's :class:`tandem.config.RunConfig`: the config file (if any), then every option the command
    line gave (``None`` = not given) on top: ``--set`` and ``--llm-opt`` add to the file's settings and
    LLM options, generation options (temperature, max_tokens) go to the method's settings."""
    from tandem.config import RunConfig, read_config_file, upgrade_legacy
    from tandem.llm.options import parse_pairs, split_llm_options

    base = upgrade_legacy(read_config_file(config_file)) if config_file else {}
    data = {**base, **{k: str(v) if isinstance(v, Path) else v for k, v in fields.items() if v is not None}}
    llm_part = dict(base.get("llm") or {})
    if llm is not None:
        llm_part["spec"] = llm
    spec = llm_part.get("spec", "local")
    backend_opts, generation = split_llm_options(spec, parse_pairs(llm_opt), data.get("method"))
    llm_part["options"] = {**llm_part.get("options", {}), **backend_opts}
    data["llm"] = llm_part
    preset_settings: dict = {}
    if preset or base.get("preset"):
        from tandem.methods.presets import SAME_LLM
        from tandem.methods.presets import preset as named

        data["preset"] = preset or base.get("preset")
        run_options, preset_settings = named(data["preset"], str(data.get("method")))
        for key, value in run_options.items():  # under the config file and the command line
            data.setdefault(key, spec if value == SAME_LLM else value)
    data["settings"] = {**preset_settings, **(base.get("settings") or {}), **parse_settings(list(set_items)),
                        **generation, **({"r2former": str(r2former)} if r2former else {})}
    base_retriever = dict(base.get("retriever") or {})
    data["retriever"] = {**base_retriever, **({"kind": retriever} if retriever else {}),
                         **({"fusion": fusion} if fusion else {}),
                         "settings": {**(base_retriever.get("settings") or {}), **parse_settings(list(retriever_opt))}}
    if data["retriever"].get("kind") == "graph":  # recorded resolved, so a run re-runs after the defaults move
        from tandem.retrieve.graph import GraphStageSettings  # the graph stage's; the first stage's stay as given

        data["retriever"]["settings"] = {**GraphStageSettings().to_dict(), **data["retriever"]["settings"]}
    if not data.get("method"):
        raise typer.BadParameter("give --method NAME (or method: in --config)")
    where = str(config_file) if config_file else "command line"
    return RunConfig.from_dict(data, where=where)


def parse_slice(spec: str) -> slice:
    """``START:END`` (either part may be empty) as a slice."""
    start, _, end = spec.partition(":")
    return slice(int(start or 0), int(end) if end else None)

