"""The OpenVINO engine's own process: one ``ContinuousBatchingPipeline`` stepped in a loop.

:class:`tandem.llm.ov_engine.OVLLM` starts ``python -m tandem.llm.ov_worker FD`` and talks to it over a
socket (``multiprocessing.connection`` messages). Why a process and not a thread: openvino-genai's Python
binding holds the GIL for the whole of ``step()`` (a model run of up to ``step_tokens`` tokens, seconds
on a 2-core CPU), so an engine thread would stop every other thread of the caller - the server's
handlers, the eval runner's retrieval - at each step (docs/openvino.md, "The engine's process").

The loop, per iteration: admit the requests that arrived (without waiting while some run), run one
engine step, follow relaxed replies (:mod:`tandem.llm.json_grammar`: a greedy reply decoded without its
strings' bounds is cut at the token before a string passes its bound and continued under the grammar
of the rest), and send back what finished.

Messages, parent to worker: an init dict (first: the model is loaded from it at once), then
``("tokens", eos_token_ids, token_bytes)`` (the tokenizer's part, sent when the parent has loaded it),
``("job", rid, ids, Params)``, ``("cancel", rid)`` (drop a request whose caller stopped waiting: no
reply), ``("stop",)`` (finish what runs, then exit). Worker to parent: ``("ready", None)`` or ``("failed", message)`` once, then
``("done", rid, token_ids, status, Stats)`` or ``("error", rid, message)`` per request. The worker exits
when the parent's end of the socket closes (the parent ended or was killed); it ignores Ctrl-C, which
the parent handles.

``$TANDEM_OV_STEP_LOG`` (a file path): the worker appends one tab-separated line per engine step (time,
requests running and waiting, wall seconds, the pipeline's :data:`STEP_METRICS`), which tells whether
slow calls come from slower steps (the engine) or from longer gaps between them (the caller).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import IO, Any

from tandem.llm.json_grammar import Cursor, RelaxedPlan
from tandem.llm.ov_messages import Params, Stats
from tandem.llm.ov_pipeline import load, pipeline
from tandem.llm.structured import json_ebnf

log = logging.getLogger(__name__)
#: names a file the worker appends one line per engine step to (module docstring)
STEP_LOG_ENV = "TANDEM_OV_STEP_LOG"
#: the pipeline's metrics (``get_metrics()``) a step-log line ends with
STEP_METRICS = ("cache_usage", "kv_cache_size_in_bytes", "scheduled_requests")
#: prompt-lookup decoding: the longest n-gram of the reply's end looked up in the prompt
LOOKUP_NGRAM = 3


@dataclass
class Job:
    """One request inside the worker, across its continuations."""

    rid: int
    ids: list[int]
    params: Params
    config: Any = None
    cursor: Cursor | None = None  # follows a relaxed reply (json_grammar)
    kept: list[int] = field(default_factory=list)  # tokens of earlier attempts, before a continuation
    current: list[int] = field(default_factory=list)  # tokens read from the running attempt
    stops: tuple[bytes, ...] = ()  # stop strings this worker looks for (empty: none, or the engine's own)
    text: bytearray = field(default_factory=bytearray)  # the bytes of the tokens accepted so far
    handle: Any = None
    pipe: Any = None  # the pipeline the running attempt is on
    peak: int = 0
    relaxed: bool = False  # started under the relaxed grammar
    continuations: int = 0


@functools.lru_cache(maxsize=256)
def relaxed_plan(schema_key: str) -> tuple[RelaxedPlan, str] | None:
    """The relaxed plan and its grammar for a schema (given as its JSON), None where it has none."""
    plan = RelaxedPlan.of(json.loads(schema_key))
    return (plan, plan.grammar()) if plan is not None else None


class WorkerEngine:
    """The pipeline and the requests it runs. ``token_bytes``: each token id's bytes (relaxed decoding
    follows replies byte by byte), or None where the tokenizer is not byte-level BPE.

    ``lookup`` > 0: ``pipe`` decodes by prompt lookup, drafting up to that many tokens a step by copying
    what followed the reply's last n-gram in the prompt; a pipeline built so runs no beam search, so
    first-token requests run on a plain pipeline that ``beams`` builds at the first of them."""

    def __init__(self, pipe: Any, ovg: Any, eos_token_ids: list[int], token_bytes: list[bytes] | None,
                 spec: str, step_log: IO[str] | None = None, *, lookup: int = 0,
                 beams: Callable[[], Any] | None = None) -> None:
        self._pipe, self._ovg, self.spec, self._step_log = pipe, ovg, spec, step_log
        self.lookup, self._beams, self._beam_pipe = lookup, beams, None
        self.eos_token_ids, self._token_bytes = eos_token_ids, token_bytes
        self.jobs: dict[int, Job] = {}  # by pipeline request id
        self._ids = itertools.count()
        self.pending: list[Job] = []  # admitted at the next step: new requests and continuations
        self.finished: list[tuple[Any, ...]] = []  # replies that ended outside the pipeline: sent with the step's
        self._dropped = False  # a cancelled request awaits the step that frees its blocks

    def submit(self, rid: int, ids: list[int], params: Params) -> None:
        """Queue a request for the next step."""
        job = Job(rid, ids, params)
        grammar = None
        if params.json_schema is not None:
            plan = (relaxed_plan(json.dumps(params.json_schema)) if params.relaxed and self._token_bytes is not None
                    else None)
            if plan is not None:
                job.cursor, grammar, job.relaxed = plan[0].cursor(), plan[1], True
        if params.stop and self._token_bytes is not None:
            job.stops = tuple(stop.encode() for stop in params.stop if stop)  # an empty one stops nothing
        job.config = self._config(params, grammar=grammar)
        self.pending.append(job)

    def _config(self, params: Params, grammar: str | None = None, max_tokens: int | None = None) -> Any:
        config = self._ovg.GenerationConfig()
        if params.first_tokens:  # one new token by beam search: its beams are the likeliest first tokens
            config.max_new_tokens, config.num_beams = 1, params.first_tokens
            config.num_return_sequences = params.first_tokens
            return config
        config.max_new_tokens = params.max_tokens if max_tokens is None else max_tokens
        config.stop_token_ids = set(self.eos_token_ids)
        if self.lookup:
            config.num_assistant_tokens, config.max_ngram_size = self.lookup, LOOKUP_NGRAM
        if params.stop and self._token_bytes is None:  # else this worker looks for them (stops_at)
            config.stop_strings = set(params.stop)
            config.include_stop_str_in_output = True  # the text is cut by the caller; token counts stay whole
        if params.temperature > 0:
            config.do_sample = True
            config.temperature = params.temperature
            config.top_p, config.top_k = 1.0, 0
            config.rng_seed = params.seed if params.seed is not None else int.from_bytes(os.urandom(4), "little")
        if params.json_schema is not None:
            config.structured_output_config = self._ovg.StructuredOutputConfig(
                grammar=grammar or json_ebnf(params.json_schema))
        return config

    def _add(self, job: Job) -> tuple[str, int, str] | None:
        import numpy as np
        import openvino as ov

        pid = next(self._ids)  # a fresh pipeline id per attempt: a cancelled attempt may still hold its own
        try:
            job.pipe = self._pipe_for(job)
            job.handle = job.pipe.add_request(pid, ov.Tensor(np.array([job.ids + job.kept], dtype=np.int64)),
                                              job.config)
        except RuntimeError as exc:
            return ("error", job.rid, f"{self.spec}: request refused: {exc}")
        self.jobs[pid] = job
        return None

    def _pipe_for(self, job: Job) -> Any:
        """The pipeline for ``job``: the main one, or under prompt lookup the beams' one for first tokens."""
        if not (self.lookup and job.params.first_tokens):
            return self._pipe
        if self._beam_pipe is None:
            assert self._beams is not None, "prompt lookup needs a pipeline for first-token beams"
            self._beam_pipe = self._beams()
        return self._beam_pipe

    def cancel(self, rid: int) -> None:
        """Drop request ``rid`` (its caller stopped waiting): it leaves the batch at the next step and
        gets no reply."""
        before = len(self.pending) + len(self.finished)
        self.pending = [job for job in self.pending if job.rid != rid]
        self.finished = [reply for reply in self.finished if reply[1] != rid]
        # a continuation or a reply that ended outside a step leaves an attempt cancelled in the pipeline
        self._dropped = self._dropped or len(self.pending) + len(self.finished) < before
        for pid, job in list(self.jobs.items()):
            if job.rid == rid:
                job.handle.cancel()
                del self.jobs[pid]
                self._dropped = True  # the pipeline frees it at its next step

    def _new_tokens(self, job: Job) -> list[int]:
        new: list[int] = []
        if job.handle.can_read():
            for output in job.handle.read().values():
                new = [int(t) for t in output.generated_ids]
        return new

    def _piece(self, token: int) -> bytes:
        assert self._token_bytes is not None
        return self._token_bytes[token] if token < len(self._token_bytes) else b""

    def stops_at(self, job: Job, token: int) -> bool:
        """Accept ``token`` into the job's text: True where it completes one of the job's stop strings.

        Stop strings are looked for here rather than by OpenVINO GenAI's sampler, whose matching decodes
        on a thread pool and was seen to hang a step for good (docs/openvino.md, "A known fault")."""
        piece = self._piece(token)
        job.text += piece
        return any(stop in job.text[-(len(stop) + len(piece)):] for stop in job.stops)

    def _stopped(self, job: Job, tokens: list[int]) -> None:
        """End a job whose reply reached a stop string with its last token (the engine frees it next step)."""
        job.handle.cancel()
        self._dropped = True
        self.finished.append(("done", job.rid, job.kept + tokens, "STOP", self._stats(job)))

    def follow(self, job: Job) -> bool:
        """Read a relaxed job's new tokens into its cursor; at a token that takes a long string past its
        bound, cancel the attempt and queue its continuation (True); at a token that ends a stop string,
        end the job (True)."""
        assert job.cursor is not None and self._token_bytes is not None
        new = self._new_tokens(job)
        for i, token in enumerate(new):
            before = job.cursor.copy()
            try:
                if job.cursor.feed(self._piece(token)):
                    if job.stops and self.stops_at(job, token):
                        self._stopped(job, job.current + new[:i + 1])
                        return True
                    continue
                rest = before.rest()
            except (ValueError, IndexError, KeyError):  # a reply the cursor cannot follow
                log.warning("%s: relaxed decoding lost its place in a reply; decoding it under the bounded grammar",
                            self.spec)
                rest = None
            job.handle.cancel()
            job.kept += job.current + new[:i]
            job.current = []
            if rest is None:  # not inside the long string at the token's start: decode bounded from the start
                job.kept, job.cursor, job.text = [], None, bytearray()
                job.config = self._config(job.params)
            elif job.params.max_tokens <= len(job.kept):  # the budget ends here as it would have bounded
                self._dropped = True  # the cancelled attempt's blocks are freed at the next step
                self.finished.append(("done", job.rid, job.kept, "LENGTH", self._stats(job)))
                return True
            else:
                job.cursor = before
                job.config = self._config(job.params, grammar=rest, max_tokens=job.params.max_tokens - len(job.kept))
            job.continuations += 1
            self.pending.append(job)
            return True
        job.current += new
        return False

    def watch(self, job: Job) -> bool:
        """Read a job's new tokens and look for its stop strings in them: True where one ended the job."""
        new = self._new_tokens(job)
        for i, token in enumerate(new):
            if self.stops_at(job, token):
                self._stopped(job, job.current + new[:i + 1])
                return True
        job.current += new
        return False

    def step(self) -> list[tuple[Any, ...]]:
        """Admit what is pending, run one engine step and return the messages of the requests that ended."""
        out, self.finished = self.finished, []
        for job in self.pending:
            refused = self._add(job)
            if refused:
                out.append(refused)
        self.pending = []
        if not self.jobs and not self._dropped:
            return out
        dropped, self._dropped = self._dropped, False
        for job in self.jobs.values():
            job.peak = max(job.peak, len(self.jobs))
        started = time.perf_counter()
        try:
            self._pipe.step()
            if self._beam_pipe is not None and (dropped or any(j.pipe is self._beam_pipe for j in self.jobs.values())):
                self._beam_pipe.step()
        except RuntimeError as exc:
            out += [("error", job.rid, f"{self.spec}: generation failed: {exc}") for job in self.jobs.values()]
            self.jobs.clear()
            return out
        if self._step_log is not None:
            self._log_step(time.perf_counter() - started)
        for pid in list(self.jobs):
            job = self.jobs[pid]
            if (self.follow(job) if job.cursor is not None else job.stops and self.watch(job)):
                del self.jobs[pid]
                continue
            status = job.handle.get_status()
            if status.name == "RUNNING":
                continue
            del self.jobs[pid]
            if (job.cursor is not None or job.stops) and (job.kept or job.current):  # read step by step
                out.append(("done", job.rid, job.kept + job.current, status.name, self._stats(job)))
                continue
            outputs = job.handle.read_all()
            if outputs and job.params.first_tokens:
                out.append(("done", job.rid, [(int(o.generated_ids[0]), float(o.score)) for o in outputs
                                              if len(o.generated_ids)], "TOP", self._stats(job)))  # (token, log-prob)
            elif outputs:
                out.append(("done", job.rid, job.kept + [int(t) for t in outputs[0].generated_ids], status.name,
                            self._stats(job)))
            else:
                out.append(("error", job.rid, f"{self.spec}: generation ended ({status.name}) without output"))
        out, self.finished = out + self.finished, []  # ended in this step's reading: sent now, not a step later
        return out

    def _log_step(self, seconds: float) -> None:
        """One line of the step log: time, running and waiting requests, wall seconds, then the pipeline's
        metrics where it has them (empty where not): KV-cache use %, KV-cache bytes, requests scheduled."""
        assert self._step_log is not None
        metrics = self._pipe.get_metrics()
        extra = "\t".join(str(getattr(metrics, name, "")) for name in STEP_METRICS)
        try:
            self._step_log.write(f"{time.time():.3f}\t{len(self.jobs)}\t{len(self.pending)}\t{seconds:.4f}\t{extra}\n")
        except OSError as exc:  # a full disk ends the log, not the engine
            log.warning("%s: the step log could not be written (%s); no more lines", self.spec, exc)
            self._step_log = None

    @staticmethod
    def _stats(job: Job) -> Stats:
        return Stats(job.peak, job.relaxed, job.continuations)

    @property
    def busy(self) -> bool:
        """True while requests run or wait for the next step."""
        return bool(self.jobs or self.pending or self.finished or self._dropped)


def serve(conn: Connection) -> None:
    """Run the worker on ``conn`` until told to stop or the parent's end closes."""
    init = conn.recv()
    try:
        pipe, ovg = load(init)
    except RuntimeError as exc:
        conn.send(("failed", f"{init['spec']}: OpenVINO could not load {init['path']}: {exc}"))
        return
    _, eos_token_ids, token_bytes = conn.recv()
    with contextlib.ExitStack() as stack:
        engine = WorkerEngine(pipe, ovg, eos_token_ids, token_bytes, init["spec"], _open_step_log(stack),
                              lookup=init.get("prompt_lookup", 0), beams=functools.partial(pipeline, ovg, init, False))
        conn.send(("ready", None))
        _loop(conn, engine, init["spec"])


def _open_step_log(stack: contextlib.ExitStack) -> IO[str] | None:
    """The file ``$TANDEM_OV_STEP_LOG`` names, opened to append (closed with ``stack``); None without it,
    or with a warning where it cannot be opened (the engine runs on without a log)."""
    path = os.environ.get(STEP_LOG_ENV, "").strip()
    if not path:
        return None
    try:
        return stack.enter_context(open(path, "a", buffering=1, encoding="utf-8"))
    except OSError as exc:
        log.warning("%s=%s: cannot open it (%s); the engine runs without a step log", STEP_LOG_ENV, path, exc)
        return None


def _loop(conn: Connection, engine: WorkerEngine, spec: str) -> None:
    """Admit messages and step the engine until told to stop (and done) or the parent is gone."""
    stopping = False
    while True:
        while conn.poll(0 if engine.busy or stopping else None):  # cancels are read while stopping too
            try:
                message = conn.recv()
            except (EOFError, OSError):  # the parent is gone: nobody to answer
                return
            if message[0] == "stop":
                stopping = True
            elif message[0] == "cancel":
                engine.cancel(message[1])
            elif stopping:
                conn.send(("error", message[1], f"{spec}: the engine is stopping"))
            else:
                _, rid, ids, params = message
                engine.submit(rid, ids, params)
        if stopping and not engine.busy:
            return
        for reply in engine.step():
            conn.send(reply)


def main(argv: list[str] | None = None) -> None:
    """``python -m tandem.llm.ov_worker FD``: serve on the inherited socket FD."""
    import socket

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].isdigit():
        raise SystemExit("usage: python -m tandem.llm.ov_worker FD (started by tandem.llm.ov_engine.OVLLM)")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; its exit ends this
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sock = socket.socket(fileno=int(args[0]))
    conn = Connection(sock.detach())
    try:
        serve(conn)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        pass  # the parent went away (while the model loaded, or while a reply was being sent)
    finally:
        conn.close()


if __name__ == "__main__":  # run as the package's module, so the messages' classes unpickle in the parent
    from tandem.llm import ov_worker

    ov_worker.main()
