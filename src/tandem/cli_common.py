"""What every ``tandem`` command module shares: the two consoles and the progress bar."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

# wide tables when piped to a file; the terminal's width otherwise
console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
out = Console(width=None if sys.stdout.isatty() else 160)


def progress_bar() -> Progress:
    """The progress bar every long command shows (on stderr)."""
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False,
    )
