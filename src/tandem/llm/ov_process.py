"""The OpenVINO engine's process seen from :class:`tandem.llm.ov_engine.OVLLM`: ``python -m
tandem.llm.ov_worker`` started on one end of a socket pair (or the same loop on a thread, over a pipe), its
replies read on a thread of their own, and watched: a process that computes nothing for
:data:`STALL_S` seconds while requests wait for it is ended (docs/openvino.md, "A known fault")."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from tandem.errors import LLMError

log = logging.getLogger(__name__)

#: seconds in which the engine process spends under :data:`STALL_CPU_S` of CPU time, while requests wait
#: for it, before it is taken for stalled and ended (a step that computes spends CPU time, however long)
STALL_S = 120.0
#: CPU seconds the process may spend within :data:`STALL_S` and still count as stalled (a hung step's
#: idle threads may wake now and then)
STALL_CPU_S = 1.0


class EngineProcess:
    """The engine process seen from :class:`OVLLM`: ``python -m tandem.llm.ov_worker`` on one end of a
    socket pair, started with ``init`` (it loads the model at once), and after :meth:`ready` a thread
    that hands its replies to ``on_message`` (``None`` and how it ended, once, when the process is gone)."""

    def __init__(self, init: dict[str, Any], spec: str, process: bool = True) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        if not process:  # the same loop on a thread of this process, over a pipe
            import multiprocessing

            self.conn, theirs = multiprocessing.Pipe()
            self._thread = threading.Thread(target=_serve_here, args=(theirs,), name=f"tandem-ov-engine-{spec}",
                                            daemon=True)
            self._thread.start()
            self._setup(init, spec)
            return
        ours, theirs = socket.socketpair()
        env = dict(os.environ)  # the worker imports this same tandem, wherever it was imported from here
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH"))
                                            if p)
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "tandem.llm.ov_worker", str(theirs.fileno())],
                                         pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, env=env)
        except OSError as exc:
            ours.close()
            raise LLMError(f"{spec}: could not start the engine process: {exc}") from exc
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())
        self._setup(init, spec)

    def _setup(self, init: dict[str, Any], spec: str) -> None:
        self.spec = spec
        self._send_lock = threading.Lock()
        self.ended = ""
        self.stalled = ""  # why the watchdog ended the process, if it did
        self._gone = False  # its replies stopped: the next request goes to a new engine
        self.reader: threading.Thread | None = None
        try:
            self.conn.send(init)
        except OSError:
            pass  # it ended at once: ready() says how

    def ready(self, tokens: tuple[Any, ...], on_message: Any, waiting: Callable[[], int] | None = None) -> None:
        """Send the tokenizer's part (``tokens``), wait until the model is loaded, then hand every reply to
        ``on_message``; with ``waiting`` (how many requests wait for a reply), end the process when it
        spends (almost) no CPU time for :data:`STALL_S` seconds while some wait.
        Raises LLMError where the process cannot load the model."""
        try:
            self.conn.send(tokens)
        except OSError:
            pass  # it may have ended after saying why: read that
        try:
            kind, text = self.conn.recv()
        except (EOFError, OSError) as exc:
            self.conn.close()
            raise LLMError(f"{self.spec}: the engine process ended while loading the model ({self._how_ended()}; "
                           "its messages are above)") from exc
        if kind != "ready":
            self.conn.close()
            self._how_ended()
            raise LLMError(text)
        self._on_message = on_message
        self.reader = threading.Thread(target=self._read, name=f"tandem-ov-{self.spec}", daemon=True)
        self.reader.start()
        if waiting is not None and self.proc is not None:  # an engine thread cannot be watched: it holds the GIL
            threading.Thread(target=self._watch, args=(waiting, STALL_S), name=f"tandem-ov-watch-{self.spec}",
                             daemon=True).start()

    def _watch(self, waiting: Callable[[], int], stall_s: float) -> None:
        import psutil

        assert self.proc is not None and self.reader is not None
        try:
            process = psutil.Process(self.proc.pid)
        except psutil.Error:
            return  # already gone: the reader says how
        spent, since = -STALL_CPU_S - 1, time.monotonic()
        while self.reader.is_alive():
            self.reader.join(min(stall_s / 4, 10.0))
            now = time.monotonic()
            count = waiting()
            try:
                times = process.cpu_times()
            except psutil.Error:
                return
            if not count or times.user + times.system - spent > STALL_CPU_S:
                spent, since = times.user + times.system, now
            elif now - since >= stall_s:
                self.stalled = (f"the engine computed nothing for {now - since:.0f} s while {count} requests "
                                "waited (a stalled OpenVINO GenAI step, docs/openvino.md \"A known fault\"), so it was "
                                "ended")
                log.error("%s: %s; the next request starts a new engine", self.spec, self.stalled)
                self.kill()
                return

    @property
    def alive(self) -> bool:
        """False once its replies have stopped (the process ended, or is ending)."""
        return self.reader is not None and self.reader.is_alive() and not self._gone

    def send(self, message: tuple[Any, ...]) -> None:
        """Send one message (OSError where the process is gone)."""
        with self._send_lock:
            self.conn.send(message)

    def stop(self, timeout: float = 120) -> None:
        """Let the process finish what it runs and exit; kill it after ``timeout`` seconds."""
        try:
            self.send(("stop",))
        except OSError:
            pass  # already gone
        if self.reader is None:
            self.kill()
            return
        self.reader.join(timeout)
        if self.reader.is_alive():
            self.kill()
            self.reader.join(10)

    def kill(self) -> None:
        """End the process now (at exit, or when it does not stop); an engine thread ends at its next step."""
        if self.proc is None:
            self.conn.close()
        elif self.proc.poll() is None:
            self.proc.kill()

    def _how_ended(self) -> str:
        if self.proc is None:
            self._thread.join(30)
            return "the engine thread ended"
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.wait()
        return f"exit code {code}" if code >= 0 else f"killed by signal {-code}"

    def _read(self) -> None:
        while True:
            try:
                message = self.conn.recv()
                self._on_message(message)
            except (EOFError, OSError):
                break
            except Exception:  # a bug: end the process rather than leave its callers waiting for ever
                log.exception("the engine process's reply could not be read; ending it")
                self.kill()
                break
        self._gone = True
        self.conn.close()
        self.ended = f"{self.stalled}: {self._how_ended()}" if self.stalled else self._how_ended()
        self._on_message(None, self.ended)


def _serve_here(conn: Connection) -> None:
    from tandem.llm.ov_worker import serve

    try:
        serve(conn)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        pass  # the engine was closed while a reply was being sent
    finally:
        conn.close()
