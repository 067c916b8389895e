"""What the HTTP server serves, without HTTP: named indexes, one LLM, methods built once per setting,
bounded pools of workers (one for questions, one for searches, one for index builds, so that a search
never waits behind a question), and the per-question loop run under a trace observer (live steps and
cancellation). The routes in :mod:`tandem.server.app` are thin over this."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

from tandem.compose import build_run
from tandem.corpus.files import HTML_SUFFIXES, TEXT_SUFFIXES
from tandem.errors import ConfigError, Conflict, IndexError_, ModelNotFoundError, NotFound, TandemError
from tandem.index import open_index
from tandem.index.index import Index
from tandem.index.store import DocStore
from tandem.io import check_text
from tandem.llm import load_llm, parse_spec
from tandem.llm.base import LLM
from tandem.methods.base import Method, warm_up
from tandem.registry import METHODS, RETRIEVERS
from tandem.retrieve import open_retriever
from tandem.secrets import redact
from tandem.server.payloads import answer_payload, step_payload
from tandem.server.schemas import request_settings_model
from tandem.settings import per_request
from tandem.types import Question, TraceObserver, observe_traces

T = TypeVar("T")
log = logging.getLogger(__name__)
#: uploads read as records (a corpus JSONL, CSV or TSV), not as one document each
RECORD_SUFFIXES = (".jsonl", ".csv", ".tsv")
#: what an upload may be: a text, Markdown or HTML page (read as a folder's files are), or a file of records
UPLOAD_SUFFIXES = (*TEXT_SUFFIXES, *HTML_SUFFIXES, *RECORD_SUFFIXES)
#: an upload's file name: a plain name ending in one of UPLOAD_SUFFIXES
UPLOAD_NAME = r"^[A-Za-z0-9][A-Za-z0-9_. -]{0,127}\.(" + "|".join(x[1:] for x in UPLOAD_SUFFIXES) + ")$"
MAX_METHODS = 32            # methods kept built (least recently used dropped)
MAX_JOBS = 100              # finished upload jobs remembered


def check_request_settings(name: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """What a request may set (:func:`tandem.server.schemas.request_settings_model`): the method's own settings
    that are not server-only (no model, LLM, file or component named by the caller), numbers within the
    server's caps. Returns them validated (only the keys given); a problem is a ConfigError naming the key."""
    entry = METHODS.get(name)
    fields = entry.settings.model_fields
    for key in settings:
        if key in fields and not per_request(fields[key]):
            raise ConfigError(f"setting {key!r} loads a model or file or picks a component: set it when starting "
                              "the server, not per request")
    model = request_settings_model(entry)
    return model.from_dict(settings, where=f"{name} settings").model_dump(exclude_unset=True)


class Busy(TandemError):
    """The work queue is full: the client should retry later (HTTP 429)."""


Lane = Literal["questions", "searches", "builds"]


class _Pool:
    """Worker threads and a bound on the work admitted to them (running + waiting); beyond it :class:`Busy`."""

    def __init__(self, what: str, workers: int, admitted: int) -> None:
        self.what, self.admitted = what, max(1, admitted)
        self._executor = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix=f"tandem-{what}")
        self._slots = threading.BoundedSemaphore(self.admitted)

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
        if not self._slots.acquire(blocking=False):
            raise Busy(f"the work queue is full ({self.admitted} {self.what} admitted); retry later")
        ctx = contextvars.copy_context()
        try:
            future = self._executor.submit(ctx.run, fn, *args, **kwargs)
        except RuntimeError:  # shut down
            self._slots.release()
            raise
        future.add_done_callback(lambda _: self._slots.release())
        return future

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class Engine:
    """Indexes by name, one LLM, and a bounded queue of questions.

    Args:
        indexes: name -> index folder (opened at start: a bad folder fails at once).
        llm: an LLM spec (``local``, ``openai:MODEL@URL``, ...) or an LLM object.
        method: the default method.
        workers: questions answered at once; ``max_queue``: questions admitted (running + waiting);
            beyond it :class:`Busy`. Searches (``/v1/retrieve``, MCP ``search``) have ``search_workers``
            threads of their own and the same bound; uploaded indexes are built one at a time on a
            thread of their own.
        uploads: the folder where indexes built from uploaded files go (None: no uploads).
    """

    def __init__(self, indexes: Mapping[str, str | Path], llm: str | LLM = "local", *, method: str | None = None,
                 llm_opts: Mapping[str, Any] | None = None, workers: int = 2, max_queue: int = 64,
                 uploads: str | Path | None = None, search_workers: int = 2) -> None:
        method = method or METHODS.default()
        METHODS.get(method)  # an unknown name: a ConfigError listing the methods
        self.indexes: dict[str, Index] = {name: _loaded(open_index(path)) for name, path in indexes.items()}
        opts = dict(llm_opts or {})
        if isinstance(llm, str) and parse_spec(llm)[0] == "local":
            opts.setdefault("engine_process", True)  # the handlers keep answering while the model computes
        self.llm: LLM = load_llm(llm, **opts) if isinstance(llm, str) else llm
        self._owns_llm = isinstance(llm, str)  # closed with the server (an engine process stops)
        self._running: set[threading.Event] = set()  # the cancel events of the questions being answered
        self._closing = False
        self.llm_spec = llm if isinstance(llm, str) else getattr(llm, "spec", type(llm).__name__)
        self.default_method = method
        self._methods: dict[tuple[str, str | None, str], tuple[Method, DocStore | None]] = {}
        self._retrievers: dict[tuple[str, str | None], tuple[Index, Any]] = {}
        self._lock = threading.Lock()
        self._pools: dict[str, _Pool] = {"questions": _Pool("questions", workers, max_queue),
                                         "searches": _Pool("searches", search_workers, max_queue),
                                         "builds": _Pool("builds", 1, MAX_JOBS)}
        self.max_queue = max_queue
        self.uploads = Path(uploads) if uploads is not None else None
        self.jobs: dict[str, dict[str, Any]] = {}
        if self.uploads is not None and self.uploads.is_dir():  # indexes uploaded before a restart
            for folder in sorted(p for p in self.uploads.iterdir() if (p / "manifest.json").is_file()):
                self.indexes.setdefault(folder.name, _loaded(open_index(folder)))

    def servable_methods(self) -> list[str]:
        """The registered methods this server answers with: those that read no gold passages and build over
        the default index with their default settings (one that needs a trained checkpoint it was not given,
        say, is left out, with a log line saying why)."""
        names = []
        for entry in METHODS.entries():
            if "gold" in entry.needs:
                continue
            try:
                self.method(entry.name, None, {})
            except (ConfigError, ModelNotFoundError, IndexError_) as exc:
                log.info("method %s is not served: %s", entry.name, exc)
                continue
            names.append(entry.name)
        if not names:
            raise ConfigError("no registered method can be served over these indexes with this LLM")
        return names

    def servable_retrievers(self) -> list[str]:
        """The registered retrievers some index can serve (``graph`` where an index has the graph extra); asking an
        index for one it cannot serve is a ConfigError naming what it lacks."""
        return [e.name for e in RETRIEVERS.entries()
                if any(all(i.has(need) for need in e.needs) for i in self.indexes.values())]

    @property
    def default_index(self) -> str | None:
        """The first index (those given at start, then uploaded ones)."""
        return next(iter(self.indexes), None)

    def index(self, name: str | None) -> Index:
        name = name or self.default_index
        if name is None or name not in self.indexes:
            raise NotFound(f"unknown index {name!r}; indexes: {sorted(self.indexes)}")
        return self.indexes[name]

    def method(self, name: str | None, index: str | None, settings: Mapping[str, Any] | None) -> tuple[Method, DocStore | None]:
        """The method ``name`` over ``index`` with ``settings``, built once and reused."""
        import json

        name = name or self.default_method
        entry = METHODS.get(name)
        settings = check_request_settings(name, settings or {})
        idx_name = (index or self.default_index) if "index" in entry.needs or index else None
        key = (name, idx_name, json.dumps(dict(settings or {}), sort_keys=True))
        with self._lock:
            if key in self._methods:
                self._methods[key] = self._methods.pop(key)  # most recently used last
            else:
                idx = self.index(idx_name) if idx_name else None
                run = build_run(name, self.llm, idx, settings)
                self._methods[key] = (run.method, run.store)
                while len(self._methods) > MAX_METHODS:
                    self._methods.pop(next(iter(self._methods)))
            return self._methods[key]

    def retrieve(self, query: str, index: str | None = None, k: int = 5, retriever: str | None = None) -> list[dict[str, Any]]:
        """Top-``k`` hits for ``query`` with their passages (a retriever is opened once per index and kind;
        an index replaced by an upload gets a new one)."""
        idx = self.index(index)
        key = (index or self.default_index or "", retriever)
        with self._lock:
            cached = self._retrievers.get(key)
            if cached is None or cached[0] is not idx:
                cached = self._retrievers[key] = (idx, open_retriever(idx, retriever))
        check_text("query", query)
        hits = cached[1].search(query, k)
        return [{**h.to_dict(), **idx.store.get(h.doc_id).to_dict()} for h in hits]

    def ask(self, question: str, method: str | None = None, index: str | None = None,
            settings: Mapping[str, Any] | None = None, on_step: Callable[[dict[str, Any]], None] | None = None,
            cancelled: threading.Event | None = None) -> dict[str, Any]:
        """Answer one question (in the calling thread) -> the answer, cited passages, trace and cost.
        ``on_step`` gets each step (:func:`step_payload`) as it completes; setting ``cancelled`` stops
        the method at its next step or LLM call."""
        check_text("question", question)
        cancelled = cancelled or threading.Event()
        with self._lock:
            if self._closing:
                cancelled.set()
            self._running.add(cancelled)
        start = time.perf_counter()
        try:
            runnable, store = self.method(method, index, settings)
            observer = TraceObserver(lambda i, step: on_step(step_payload(i, step, store)) if on_step else None,
                                     cancelled)
            with observe_traces(observer):
                answer = runnable.answer(Question("ask", question))
        finally:
            with self._lock:
                self._running.discard(cancelled)
        return answer_payload(answer, store, method or self.default_method, time.perf_counter() - start)

    def submit(self, fn: Callable[..., T], *args: Any, lane: Lane = "questions", **kwargs: Any) -> Future[T]:
        """Run ``fn`` on a worker of ``lane`` if its queue has room (else :class:`Busy`), in a copy of this
        context. Each lane has threads of its own: a search is not kept waiting by the questions."""
        return self._pools[lane].submit(fn, *args, **kwargs)

    def start_index_job(self, name: str, files: Mapping[str, str], kind: str = "bm25") -> dict[str, Any]:
        """Build index ``name`` from uploaded ``files`` (file name -> text; UPLOAD_SUFFIXES) in the
        background, into the server's own uploads folder with the CLI's atomic build; returns the job."""
        if self.uploads is None:
            raise ConfigError("this server takes no uploads (start it with --uploads DIR)")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", name):
            raise ConfigError(f"index name {name!r}: letters, digits, '-' and '_' only (at most 64)")
        if name in self.indexes and not (self.uploads / name).exists():
            raise Conflict(f"index {name!r} is one the server was started with; choose another name")
        for fname in files:
            if not re.fullmatch(UPLOAD_NAME, fname):
                raise ConfigError(f"file name {fname!r}: a plain name ending in one of {list(UPLOAD_SUFFIXES)}")
        if not files:
            raise ConfigError("no files to index")
        job = {"id": uuid.uuid4().hex[:12], "index": name, "kind": kind, "state": "queued", "files": len(files),
               "passages": None, "error": None, "seconds": None}
        with self._lock:
            if any(j["index"] == name and j["state"] not in ("done", "error") for j in self.jobs.values()):
                raise Conflict(f"index {name!r} is being built by another job; wait for it")
            finished = [k for k, j in self.jobs.items() if j["state"] in ("done", "error")]
            for k in finished[:max(0, len(self.jobs) - MAX_JOBS + 1)]:
                del self.jobs[k]
            self.jobs[job["id"]] = job
        try:
            self.submit(self._build, job, dict(files), lane="builds")
        except (Busy, RuntimeError):  # not queued (a full queue, or the server stopping): the name is free again
            with self._lock:
                self.jobs.pop(job["id"], None)
            raise
        return dict(job)

    def _build(self, job: dict[str, Any], files: dict[str, str]) -> None:
        import tempfile

        from tandem.corpus import load_corpus
        from tandem.index import build_index

        assert self.uploads is not None
        start = time.perf_counter()
        try:
            with tempfile.TemporaryDirectory(prefix="tandem-upload-") as tmp:
                job["state"] = "reading"
                docs = []
                texts = {f: t for f, t in files.items() if not f.lower().endswith(RECORD_SUFFIXES)}
                if texts:
                    for fname, text in texts.items():
                        (Path(tmp) / fname).write_text(text, encoding="utf-8")
                    docs += load_corpus(Path(tmp), format="folder")
                for fname, text in files.items():
                    if fname.lower().endswith(RECORD_SUFFIXES):
                        path = Path(tmp) / "records" / fname
                        path.parent.mkdir(exist_ok=True)
                        path.write_text(text, encoding="utf-8")
                        docs += load_corpus(path)
                job.update(state="indexing", passages=len(docs))
                build_index(docs, self.uploads / job["index"], kind=job["kind"])
            index = _loaded(open_index(self.uploads / job["index"]))
            with self._lock:
                self.indexes[job["index"]] = index
                self._methods = {k: v for k, v in self._methods.items() if k[1] != job["index"]}
            job["state"] = "done"
        except Exception as exc:  # noqa: BLE001 - a failed build is the job's result, reported by GET /v1/jobs/ID
            job.update(state="error", error=redact(f"{type(exc).__name__}: {exc}"))
        finally:
            job["seconds"] = round(time.perf_counter() - start, 3)

    def start_warm_up(self, method: str | None = None) -> threading.Thread:
        """Compute, on a thread of its own, what every prompt of ``method``'s roles (default: the default
        method's) begins with, where the LLM keeps it (:func:`tandem.methods.base.warm_up`): the first
        question asked is then spared it. A question asked meanwhile decodes beside it; :meth:`close`
        cancels it."""
        thread = threading.Thread(target=self._warm_up, args=(method or self.default_method,), name="tandem-warm-up",
                                  daemon=True)
        thread.start()
        return thread

    def _warm_up(self, name: str) -> None:
        if "index" in METHODS.get(name).needs and self.default_index is None:
            return  # nothing to answer over until an index is uploaded
        cancelled = threading.Event()
        with self._lock:
            if self._closing:
                return
            self._running.add(cancelled)
        start = time.perf_counter()
        try:
            method, _store = self.method(name, None, {})
            with observe_traces(TraceObserver(lambda i, step: None, cancelled)):
                sent, tokens = warm_up(method)
            if sent:
                log.info("computed the %s roles' instructions ahead: %d prompts, %d tokens, %.1f s",
                         name, sent, tokens, time.perf_counter() - start)
        except Exception as exc:  # noqa: BLE001 - the first question pays for the instructions instead
            if not cancelled.is_set():  # a stop cancels it, quietly
                log.warning("could not compute the %s roles' instructions ahead: %s", name, redact(str(exc)))
        finally:
            with self._lock:
                self._running.discard(cancelled)

    def close(self) -> None:
        """Stop: questions waiting in the queue are dropped, those being answered are cancelled (the
        LLM call each waits on leaves the engine's batch), and an LLM the server loaded is closed."""
        for pool in self._pools.values():
            pool.shutdown()
        with self._lock:  # a question that starts from now on is cancelled at once (ask)
            self._closing = True
            for event in self._running:
                event.set()
        close = getattr(self.llm, "close", None)
        if self._owns_llm and callable(close):
            close()


def call_in_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
    """Have ``loop``'s thread run ``fn(*args)`` (from a worker thread); nothing once the loop has closed
    (the server stopped: nobody is left to read what a question still reports)."""
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the loop is closed
        pass


def _loaded(index: Index) -> Index:
    """``index`` with its components loaded now: a later replacement of its folder (an upload under the
    same name) cannot mix files of two builds into one Index."""
    for component, attr in (("bm25", "bm25"), ("dense", "faiss")):
        if index.has(component):
            getattr(index, attr)
    return index
