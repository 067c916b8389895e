"""Stop signals handled as Ctrl-C: SIGTERM and SIGHUP (a ``kill``, ``timeout``, a batch scheduler's end of
job, a container or service stop, a closed terminal) raise :class:`Stopped` - a KeyboardInterrupt - in the
main thread, so the work unwinds as it does on Ctrl-C: finished answers and shards kept, partial metrics
written, folders unlocked, child servers stopped.

Python drops an exception raised inside a finalizer (``__del__``, a weakref callback: "Exception ignored
in ..."), so a signal that lands while the garbage collector runs one (a library's, during an import) would
be lost and the work would go on to its end. Each signal is recorded when it arrives, and :func:`check`,
which long work calls at each progress report, raises it again where its interrupt did not stop the work."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

#: the signals handled as Ctrl-C; SIGINT itself too, where Python's own handler is set (not where it is ignored)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
#: the signals received in this process, in order (click turns the interrupt into an exit code of its own)
received: list[int] = []
_raised_again = [0]  # how many of ``received`` :func:`check` has raised again


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
        raise _interrupt(signum)

    received.clear()  # one command's signals (tests run several in one process)
    _raised_again[0] = 0
    ours = STOP_SIGNALS + ((signal.SIGINT,) if signal.getsignal(signal.SIGINT) is signal.default_int_handler else ())
    previous = {sig: signal.signal(sig, handler) for sig in ours}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _interrupt(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else Stopped(signum)


def check() -> None:
    """Raise again, in the main thread, the last signal received since the last call that raised, where its
    own interrupt was lost (see the module doc): called at each progress report, it stops the work at the next
    one. A signal whose interrupt went its way is raised again only if the work it unwinds reports progress."""
    if len(received) > _raised_again[0] and threading.current_thread() is threading.main_thread():
        _raised_again[0] = len(received)
        raise _interrupt(received[-1])


def exit_code() -> int:
    """The exit code of an interrupted command: 128 + the first stop signal received (click turns the interrupt
    into an Abort or an exit code of its own, so the signal is recorded when it arrives), else 130 (Ctrl-C)."""
    return 128 + received[0] if received else 130
