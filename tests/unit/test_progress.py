"""Progress: library code reports ``on_progress(done, total)``; the CLI bar appears only for work
lasting over its delay."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from rich.console import Console

from tandem.cli.common import LazyProgress, progress_bar
from tandem.index import build_index
from tandem.testing.encoders import HashingEncoder
from tandem.types import Document


def _console(terminal: bool = True) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=terminal, force_interactive=terminal, width=100), buf


def test_build_index_reports_encoding_progress_with_rising_counts(tmp_path: Path) -> None:
    docs = [Document(f"d{i}", f"title {i}", f"passage number {i} about rivers") for i in range(10)]
    seen: list[tuple[int, int]] = []
    build_index(docs, tmp_path / "idx", kind="dense", encoder=HashingEncoder(), batch_size=3,
                on_progress=lambda done, total: seen.append((done, total)))
    assert seen == [(3, 10), (6, 10), (9, 10), (10, 10)]


@pytest.mark.parametrize("terminal", [True, False])
def test_short_work_draws_no_bar(terminal: bool) -> None:
    target, buf = _console(terminal)
    with progress_bar(delay=5.0, target=target) as bar:
        report = bar.callback("encode")
        for i in range(1, 4):
            report(i, 3)
    assert not bar.live.is_started
    assert buf.getvalue() == ""  # not even a blank line when piped


def test_long_work_draws_the_bar_with_what_was_reported() -> None:
    target, buf = _console()
    with progress_bar(delay=0.05, target=target) as bar:
        report = bar.callback("encode")
        report(1, 4)
        deadline = time.monotonic() + 5
        while not bar.live.is_started and time.monotonic() < deadline:
            time.sleep(0.01)
        assert bar.live.is_started
        report(4, 4)
    assert not bar.live.is_started
    assert "encode" in buf.getvalue() and "4/4" in buf.getvalue()


def test_a_log_file_gets_plain_lines_at_most_every_interval_and_at_the_end() -> None:
    """stderr sent to a file: no live bar (rich would draw it only when the work ends) but one line per
    task when the bar would appear, then at most every ``line_every`` seconds, and its last state."""
    clock = [0.0]
    target, buf = _console(terminal=False)
    with LazyProgress(console=target, delay=0.01, line_every=30.0, get_time=lambda: clock[0]) as bar:
        report = bar.callback("answer questions")
        report(1, 40)
        deadline = time.monotonic() + 5
        while "1/40" not in buf.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        for i in range(2, 30):  # all within the interval: no line
            clock[0] += 1.0
            report(i, 40)
        clock[0] = 31.0
        report(30, 40)
        report(31, 40)  # within the interval again: no line
        report(2_000_000, 4_000_000)  # its last state when the work stops gets a line; counts print whole
    lines = buf.getvalue().splitlines()
    assert not bar.live.is_started
    assert lines[0] == "answer questions: 1/40 (2 %) 0:00:00 elapsed, ~? left"  # no rate yet
    assert lines[1] == "answer questions: 30/40 (75 %) 0:00:31 elapsed, ~0:00:10 left"  # 29 in 31 s since then
    assert lines[2] == "answer questions: 2000000/4000000 (50 %) 0:00:31 elapsed, ~0:00:31 left"
    assert len(lines) == 3


def test_slow_work_in_a_log_file_gets_its_time_left_from_its_rate_since_the_first_line() -> None:
    """A question every two minutes: rich's own estimate (the last 30 s of samples) has nothing to go on."""
    clock = [0.0]
    target, buf = _console(terminal=False)
    with LazyProgress(console=target, delay=0.01, get_time=lambda: clock[0]) as bar:
        report = bar.callback("naive_rag")
        report(1, 10)
        deadline = time.monotonic() + 5
        while "1/10" not in buf.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        clock[0] = 240.0
        report(3, 10)
    assert buf.getvalue().splitlines()[1] == "naive_rag: 3/10 (30 %) 0:04:00 elapsed, ~0:14:00 left"
    with LazyProgress(console=target, delay=0.01, get_time=lambda: clock[0]) as bar:
        bar.callback("encode")(64, 0)  # a streamed corpus: no total, so no time left to give
        deadline = time.monotonic() + 5
        while "encode" not in buf.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    assert buf.getvalue().splitlines()[-1] == "encode: 64 0:00:00 elapsed"


def test_a_stage_that_never_reports_adds_no_task() -> None:
    target, _ = _console()
    with progress_bar(delay=5.0, target=target) as bar:
        bar.callback("encode")
        progress = bar.labelled()
        progress("train client 0", 1, 2)
        progress("train client 0", 2, 2)
        progress("eval client 0", 1, 1)
        on_step = bar.training("train")
        on_step.stage("train lists")(5, 8)
        on_step(3, 10, 0.25)
    tasks = {t.description: (t.completed, t.total) for t in bar.tasks}
    assert tasks == {"train client 0": (2, 2), "eval client 0": (1, 1), "train lists": (5, 8),
                     "train loss 0.250": (3, 10)}
