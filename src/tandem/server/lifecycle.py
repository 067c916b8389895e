"""How ``tandem serve`` stops: on SIGTERM, SIGINT or SIGHUP it stops taking connections, gives the
requests in flight a grace period to finish (then cancels them) and ends normally (exit 0)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class GracefulServer(uvicorn.Server):
    """uvicorn's server with the grace period of ``config.timeout_graceful_shutdown``, whose stop
    signals end :meth:`run` normally: uvicorn's own handling raises the signal again once it has shut
    down, so the process would die by it (exit 143 for a ``kill``, however cleanly it stopped)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def serve_until_stopped(app: Any, *, host: str, port: int, grace: float, on_stop: Any = None) -> None:
    """Serve ``app`` until a stop signal; in-flight requests get ``grace`` seconds; ``on_stop()`` runs
    after (e.g. the engine cancelling queued questions)."""
    try:
        GracefulServer(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off",  # none used
                                      timeout_graceful_shutdown=grace)).run()
    finally:
        if on_stop is not None:
            on_stop()
