"""Stop signals handled as Ctrl-C: SIGTERM and SIGHUP (a ``kill``, ``timeout``, a batch scheduler's end of
job, a container or service stop, a closed terminal) raise :class:`Stopped` - a KeyboardInterrupt - in the
main thread, so the work unwinds as it does on Ctrl-C: finished answers and shards kept, partial metrics
written, folders unlocked, child servers stopped."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

#: the signals handled; SIGINT is Ctrl-C's own KeyboardInterrupt
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
#: the stop signals received in this process, in order (click turns the interrupt into an exit code of its own)
received: list[int] = []


class Stopped(KeyboardInterrupt):
    """A stop signal arrived (:data:`STOP_SIGNALS`); ``signum`` says which (exit code 128 + signum)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Within the block, the stop signals raise :class:`Stopped` in the main thread; the previous handlers come
    back after (a server that handles them itself, as ``tandem serve`` does, sets its own inside)."""
    def handler(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        raise Stopped(signum)

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def exit_code() -> int:
    """The exit code of an interrupted command: 128 + the first stop signal received (click turns the interrupt
    into an Abort or an exit code of its own, so the signal is recorded when it arrives), else 130 (Ctrl-C)."""
    return 128 + received[0] if received else 130
