"""The ``local`` backend's default engine: OpenVINO GenAI with continuous batching and prefix caching.

:class:`OVLLM` runs an OpenVINO export of the converted model (:func:`tandem.llm.local.ensure_exported`)
in a ``ContinuousBatchingPipeline`` driven by one engine thread:

- every :meth:`OVLLM.complete` call, from any thread, queues its request; the engine thread adds it
  to the running batch at the next step, so the eval runner's and the server's concurrent requests
  decode together (continuous batching), each with its own grammar and stop strings;
- prefix caching keeps the KV blocks of prompts already seen: a role's instructions and
  demonstrations, and a question's growing prefix across a method's steps, are computed once;
- a greedy request whose schema has long strings decodes under a grammar without their upper bounds
  and continues from the token before the step a string passes its bound, under the grammar of the
  rest of the reply (:mod:`tandem.llm.json_grammar`): the bounded grammar's reply at the speed of
  an unbounded one (``relax_strings``);
- OpenVINO's CPU plugin picks its kernels at run time for the CPU it runs on (AVX2, AVX-512,
  AVX-512 BF16/VNNI, AMX); it computes in the ``dtype`` given (the ``local`` backend asks for f32 with
  the GGUF's own 4-bit weights, :data:`tandem.llm.local.OPENVINO_DEFAULTS`), else in bf16 where the CPU has it.

Prompts are the same token ids the transformers engine builds (:func:`tandem.llm.hf.chat_token_ids`),
so prompt and completion token counts mean the same thing on both engines. A request's JSON schema
becomes an EBNF grammar without free whitespace (:func:`tandem.llm.structured.json_ebnf`).

Methods that work on input embeddings (R²AG) and training use the model in transformers: the
members that need it (``model``, ``embed_ids``, ``generate_from_embeds``, ...) load :class:`HFLLM` on
the converted folder at first use.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tandem.errors import ConfigError, LLMError
from tandem.llm.hf import (
    HFLLM,
    JSON_MODES,
    available_cpus,
    chat_token_ids,
    end_of_turn_ids,
    requested_threads,
)
from tandem.llm.json_grammar import Cursor, RelaxedPlan
from tandem.llm.structured import json_ebnf
from tandem.llm.types import LLMRequest, LLMResponse, Message, truncate_at_stop, with_json_instruction
from tandem.models import offline_env

log = logging.getLogger(__name__)

# ``dtype`` option -> OpenVINO's inference precision (default: the plugin's choice, bf16 where the CPU has it)
PRECISIONS = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
#: ``kv_cache`` option -> the CPU plugin's KV_CACHE_PRECISION (its own default there is u8)
KV_PRECISIONS = {"u8": "u8", "float16": "f16", "bfloat16": "bf16", "float32": "f32"}
DEFAULT_KV_CACHE = "u8"
DEFAULT_MAX_BATCH = 16
DEFAULT_KV_CACHE_GB = 1
DEFAULT_STEP_TOKENS = 512


@dataclass
class _Job:
    ids: list[int]
    config: Any
    req: LLMRequest | None = None
    cursor: Cursor | None = None  # follows a relaxed reply (json_grammar)
    kept: list[int] = field(default_factory=list)  # tokens of earlier attempts, before a continuation
    current: list[int] = field(default_factory=list)  # tokens read from the running attempt
    future: Future[tuple[list[int], str]] = field(default_factory=Future)
    handle: Any = None


@functools.lru_cache(maxsize=256)
def _relaxed(schema_key: str) -> tuple[RelaxedPlan, str] | None:
    plan = RelaxedPlan.of(json.loads(schema_key))
    return (plan, plan.grammar()) if plan is not None else None


def token_bytes(tokenizer: Any) -> list[bytes] | None:
    """The bytes each token id stands for, for a byte-level BPE tokenizer (GPT-2's byte alphabet, as
    SmolLM2's); special tokens map to no bytes. None for other tokenizers."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    decoder = {ch: b for b, ch in bytes_to_unicode().items()}
    special = set(tokenizer.all_special_ids)
    table: list[bytes] = []
    for i, piece in enumerate(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))):
        if i in special or piece is None:
            table.append(b"")
        elif all(ch in decoder for ch in piece):
            table.append(bytes(decoder[ch] for ch in piece))
        else:
            return None
    return table


class OVLLM:
    """A causal LM exported to OpenVINO, served to many threads by one continuous-batching engine.

    Args:
        model_dir: the OpenVINO export (``openvino_model.xml`` and config files).
        torch_dir: the transformers folder it was exported from (tokenizer, chat template, and the
            model for the embeddings path).
        num_threads: CPU threads of the engine (else ``$TANDEM_LLM_THREADS``, else :func:`idle_cpus`).
        max_batch: sequences decoded together at most; ``kv_cache_gb``: memory for KV blocks
            (prefix cache included).
        step_tokens: tokens one engine step computes at most (prompt chunks and decoded tokens
            together): a long prompt is prefilled in chunks of about this size, and the requests
            decoding beside it, and every other Python thread of the process, wait for each chunk.
        dtype: inference precision (``float32``/``bfloat16``/``float16``); default: OpenVINO's
            choice for the CPU (bf16 where it has AVX-512 BF16 or AMX).
        kv_cache: precision of the KV cache (``u8``/``float16``/``bfloat16``/``float32``).
        dynamic_quantization: group size of the CPU plugin's dynamic int8 quantization of activations
            in matmuls with compressed (int8/int4) weights; 0 turns it off; default: the plugin's (on).
        relax_strings: decode greedy requests' long strings without their bounds and continue at a
            bound (:mod:`tandem.llm.json_grammar`; same replies, faster); False: the bounded grammar.

    Attributes:
        tokenizer: the transformers tokenizer; ``eos_token_ids``: ids that end generation;
        threads: engine threads; peak_batch: the most sequences seen in one step;
        relaxed_requests / continuations: requests decoded relaxed, and continuations at a bound.
    """

    def __init__(
        self,
        model_dir: str | Path,
        torch_dir: str | Path,
        *,
        spec: str = "local",
        name: str = "smollm2",
        num_threads: int | None = None,
        json_mode: str = "schema",
        max_batch: int = DEFAULT_MAX_BATCH,
        kv_cache_gb: int = DEFAULT_KV_CACHE_GB,
        step_tokens: int = DEFAULT_STEP_TOKENS,
        dtype: str | None = None,
        kv_cache: str = DEFAULT_KV_CACHE,
        dynamic_quantization: int | None = None,
        relax_strings: bool = True,
    ) -> None:
        if json_mode not in JSON_MODES:
            raise ConfigError(f"unknown json_mode {json_mode!r} for an in-process model; modes: {sorted(JSON_MODES)}")
        if dtype is not None and dtype not in PRECISIONS:
            raise ConfigError(f"unknown dtype {dtype!r}; dtypes: {sorted(PRECISIONS)}")
        if kv_cache not in KV_PRECISIONS:
            raise ConfigError(f"unknown kv_cache {kv_cache!r}; KV cache precisions: {sorted(KV_PRECISIONS)}")
        if kv_cache == "float32" and dtype != "float32":
            raise ConfigError("kv_cache=float32 needs dtype=float32 (OpenVINO keeps no f32 KV cache under bf16/f16 "
                              "compute); use kv_cache=bfloat16, or add dtype=float32")
        if not isinstance(relax_strings, bool):
            raise ConfigError(f"relax_strings is true or false, got {relax_strings!r}")
        for key, value in (("max_batch", max_batch), ("kv_cache_gb", kv_cache_gb), ("step_tokens", step_tokens)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{key} is a whole number, got {value!r}")
        if max_batch < 1 or kv_cache_gb < 1:
            raise ConfigError(f"max_batch and kv_cache_gb must be >= 1, got {max_batch} and {kv_cache_gb}")
        if step_tokens < max_batch:
            raise ConfigError(f"step_tokens must be >= max_batch ({max_batch}): each step decodes a token of every "
                              f"running sequence; got {step_tokens}")
        offline_env()
        import openvino_genai as ovg
        from transformers import AutoTokenizer, GenerationConfig

        self._ovg = ovg
        self.spec, self.name, self.json_mode = spec, name, json_mode
        self.path, self.torch_path = str(model_dir), str(torch_dir)
        self.tokenizer: Any = AutoTokenizer.from_pretrained(self.torch_path)
        self.eos_token_ids = end_of_turn_ids(self.tokenizer, GenerationConfig.from_pretrained(self.torch_path), spec)
        self.pad_token_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_token_ids[0]
        )
        self.threads = requested_threads(num_threads) or idle_cpus()
        # byte-level BPE tokens only (SmolLM2's); other tokenizers decode under the bounded grammar
        self._token_bytes = token_bytes(self.tokenizer) if relax_strings else None
        #: what computes the replies, recorded in a run's config.json notes
        self.engine_note = (f"openvino {Path(model_dir).name}, dtype={dtype or 'the plugin default'}, kv_cache={kv_cache}, "
                            f"dynamic_quantization={'the plugin default' if dynamic_quantization is None else dynamic_quantization}, "
                            f"relax_strings={self._token_bytes is not None}, {self.threads} threads")
        self.context_window: int | None = _max_positions(self.torch_path)
        scheduler = ovg.SchedulerConfig()
        scheduler.enable_prefix_caching = True
        scheduler.cache_size = kv_cache_gb
        scheduler.max_num_seqs = max_batch
        scheduler.max_num_batched_tokens = step_tokens
        scheduler.dynamic_split_fuse = True
        props: dict[str, Any] = {"INFERENCE_NUM_THREADS": self.threads, "CACHE_DIR": str(Path(model_dir) / "compiled"),
                                 "KV_CACHE_PRECISION": KV_PRECISIONS[kv_cache]}
        if dtype is not None:
            props["INFERENCE_PRECISION_HINT"] = PRECISIONS[dtype]
        if dynamic_quantization is not None:
            if int(dynamic_quantization) < 0:
                raise ConfigError(f"dynamic_quantization is a group size >= 0 (0: off), got {dynamic_quantization}")
            props["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = int(dynamic_quantization)
        try:
            self._pipe = ovg.ContinuousBatchingPipeline(self.path, scheduler, "CPU", props)
        except RuntimeError as exc:
            raise LLMError(f"{spec}: OpenVINO could not load {self.path}: {exc}") from exc
        self.peak_batch = 0
        self.relaxed_requests = self.continuations = 0
        self._tok_lock = threading.Lock()  # fast tokenizers are not safe to call from several threads
        self._torch: HFLLM | None = None
        self._torch_lock = threading.Lock()
        self._ids = itertools.count()
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._engine = threading.Thread(target=self._run, name=f"tandem-ov-{name}", daemon=True)
        self._engine.start()

    @property
    def constrains_json(self) -> bool:
        """True when requests with a JSON schema are decoded under it (``json_mode="schema"``)."""
        return self.json_mode == "schema"

    # -- chat completion ---------------------------------------------------------------------

    def complete(self, req: LLMRequest) -> LLMResponse:
        """Greedy (``temperature == 0``) or seeded sampling generation for one chat request; blocks
        until done while other threads' requests decode in the same batch."""
        constrained = req.json_schema is not None and self.constrains_json
        messages = req.messages if constrained else with_json_instruction(req)
        with self._tok_lock:
            ids = chat_token_ids(self.tokenizer, messages)
        relaxed = (_relaxed(json.dumps(req.json_schema)) if constrained and req.temperature == 0
                   and self._token_bytes is not None else None)
        config = self._config(req, constrained, grammar=relaxed[1] if relaxed else None)
        start = time.perf_counter()
        job = _Job(ids, config, req, relaxed[0].cursor() if relaxed else None)
        self._queue.put(job)
        new_ids, _status = job.future.result()
        latency = time.perf_counter() - start
        ended = bool(new_ids) and new_ids[-1] in self.eos_token_ids
        with self._tok_lock:
            raw = str(self.tokenizer.decode(new_ids[:-1] if ended else new_ids, skip_special_tokens=True))
        text, hit_stop = truncate_at_stop(raw, req.stop)
        return LLMResponse(
            text=text,
            prompt_tokens=len(ids),
            completion_tokens=len(new_ids),
            latency_s=latency,
            finish_reason="stop" if (ended or hit_stop) else "length",
            model=self.name,
            constrained=constrained,
        )

    def count_tokens(self, text: str) -> int:
        """Number of tokens of ``text`` (no special tokens added)."""
        with self._tok_lock:
            return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def close(self) -> None:
        """Stop the engine thread (requests still queued are answered first)."""
        self._queue.put(None)
        self._engine.join()

    def _config(self, req: LLMRequest, constrained: bool, grammar: str | None = None, max_tokens: int | None = None) -> Any:
        config = self._ovg.GenerationConfig()
        config.max_new_tokens = req.max_tokens if max_tokens is None else max_tokens
        config.stop_token_ids = set(self.eos_token_ids)
        if req.stop:
            config.stop_strings = set(req.stop)
            config.include_stop_str_in_output = True  # the text is cut below; token counts stay whole
        if req.temperature > 0:
            config.do_sample = True
            config.temperature = req.temperature
            config.top_p, config.top_k = 1.0, 0
            config.rng_seed = req.seed if req.seed is not None else int.from_bytes(os.urandom(4), "little")
        if constrained:
            config.structured_output_config = self._ovg.StructuredOutputConfig(grammar=grammar or json_ebnf(req.json_schema))
        return config

    def _add(self, job: _Job, jobs: dict[int, _Job]) -> None:
        import numpy as np
        import openvino as ov

        rid = next(self._ids)
        try:
            job.handle = self._pipe.add_request(rid, ov.Tensor(np.array([job.ids + job.kept], dtype=np.int64)),
                                                job.config)
        except RuntimeError as exc:
            job.future.set_exception(LLMError(f"{self.spec}: request refused: {exc}"))
            return
        jobs[rid] = job
        if job.cursor is not None and not job.kept:
            self.relaxed_requests += 1

    def _follow(self, job: _Job) -> bool:
        """Read a relaxed job's new tokens into its cursor; at a token that takes a long string past its
        bound, cancel the attempt and queue its continuation (True)."""
        assert job.cursor is not None and job.req is not None and self._token_bytes is not None
        new = []
        if job.handle.can_read():
            for output in job.handle.read().values():
                new = [int(t) for t in output.generated_ids]
        for i, token in enumerate(new):
            before = job.cursor.copy()
            try:
                if job.cursor.feed(self._token_bytes[token] if token < len(self._token_bytes) else b""):
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
                job.kept, job.cursor = [], None
                job.config = self._config(job.req, True)
            elif job.req.max_tokens <= len(job.kept):  # the budget ends here as it would have bounded
                job.future.set_result((job.kept, "LENGTH"))
                return True
            else:
                job.cursor = before
                job.config = self._config(job.req, True, grammar=rest, max_tokens=job.req.max_tokens - len(job.kept))
            self.continuations += 1
            self._queue.put(job)
            return True
        job.current += new
        return False

    def _run(self) -> None:
        """The engine thread: admit queued requests, step the batch, hand finished ones back."""
        running = "RUNNING"
        jobs: dict[int, _Job] = {}
        while True:
            try:
                while True:
                    job = self._queue.get(block=not jobs)
                    if job is None:
                        if not jobs:
                            return
                        self._queue.put(None)  # finish what runs, then stop
                        break
                    self._add(job, jobs)
            except queue.Empty:
                pass
            if not jobs:
                continue
            self.peak_batch = max(self.peak_batch, len(jobs))
            try:
                self._pipe.step()
            except RuntimeError as exc:
                for job in jobs.values():
                    job.future.set_exception(LLMError(f"{self.spec}: generation failed: {exc}"))
                jobs.clear()
                continue
            for rid in list(jobs):
                job = jobs[rid]
                if job.cursor is not None and self._follow(job):
                    del jobs[rid]
                    continue
                status = job.handle.get_status()
                if status.name == running:
                    continue
                del jobs[rid]
                if job.cursor is not None:
                    job.future.set_result((job.kept + job.current, status.name))
                    continue
                outputs = job.handle.read_all()
                if outputs:
                    job.future.set_result((job.kept + [int(t) for t in outputs[0].generated_ids], status.name))
                else:
                    job.future.set_exception(LLMError(f"{self.spec}: generation ended ({status.name}) without output"))

    # -- the transformers model, for embeddings and training -----------------------------------

    @property
    def torch_llm(self) -> HFLLM:
        """:class:`HFLLM` on the converted folder, loaded at first use (embeddings path, training)."""
        with self._torch_lock:
            if self._torch is None:
                self._torch = HFLLM(self.torch_path, spec=self.spec, name=self.name, num_threads=self.threads,
                                    json_mode=self.json_mode)
            return self._torch

    @property
    def model(self) -> Any:
        """The transformers model (loads :attr:`torch_llm`)."""
        return self.torch_llm.model

    @model.setter
    def model(self, value: Any) -> None:
        self.torch_llm.model = value

    def encode_chat(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> Any:
        """Token ids ``[1, n]`` (a torch tensor) of ``messages`` through the chat template."""
        return self.torch_llm.encode_chat(messages, add_generation_prompt)

    def input_embeddings(self) -> Any:
        """The transformers model's token embedding layer."""
        return self.torch_llm.input_embeddings()

    def embed_ids(self, input_ids: Any) -> Any:
        """Embeddings of ``input_ids`` from the transformers model."""
        return self.torch_llm.embed_ids(input_ids)

    def forward(self, input_ids: Any = None, **kwargs: Any) -> Any:
        """One forward pass of the transformers model (see :meth:`HFLLM.forward`)."""
        return self.torch_llm.forward(input_ids, **kwargs)

    def generate_from_embeds(self, inputs_embeds: Any, **kwargs: Any) -> LLMResponse:
        """Generate from prompt embeddings with the transformers model (see :meth:`HFLLM.generate_from_embeds`)."""
        return self.torch_llm.generate_from_embeds(inputs_embeds, **kwargs)

    def __repr__(self) -> str:
        return f"OVLLM(name={self.name!r}, path={self.path!r}, threads={self.threads})"


def idle_cpus(window_s: float = 0.3, stat: str = "/proc/stat") -> int:
    """Threads for the engine when none are asked for: the CPUs this process may use, less what other
    processes keep busy right now (:func:`busy_cpus` over ``window_s``; the 1-minute load average where
    ``/proc/stat`` cannot be read), at least 1. On a saturated 2-core machine one thread decoded as fast
    as two or faster (docs/llm.md): threads that wait for a descheduled sibling at every layer lose
    more than the second core gives. The load average is not used first because it trails by a
    minute: right after a run it still counts the run's own cores as busy."""
    cpus = available_cpus()
    busy = busy_cpus(window_s, stat)
    if busy is None:
        try:
            busy = os.getloadavg()[0]
        except OSError:
            return cpus
    return max(1, min(cpus, round(cpus - busy)))


def busy_cpus(window_s: float = 0.3, stat: str = "/proc/stat") -> float | None:
    """CPUs kept busy over the next ``window_s`` seconds, machine-wide (from two readings of the
    aggregate ``cpu`` line of ``/proc/stat``: non-idle jiffies over all jiffies, times the CPU count);
    None where the file cannot be read."""
    def read() -> tuple[int, int] | None:
        try:
            fields = Path(stat).read_text().split("\n", 1)[0].split()
            ticks = [int(x) for x in fields[1:]]
        except (OSError, ValueError, IndexError):
            return None
        if fields[0] != "cpu" or len(ticks) < 5:
            return None
        return sum(ticks[:8]), ticks[3] + ticks[4]  # total (user..steal), idle + iowait

    first = read()
    time.sleep(window_s)
    second = read()
    if first is None or second is None or second[0] <= first[0]:
        return None
    total, idle = second[0] - first[0], second[1] - first[1]
    return (os.cpu_count() or 1) * (total - idle) / total


def _max_positions(folder: str) -> int | None:
    import json

    try:
        value = json.loads((Path(folder) / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        return None
    return int(value) if isinstance(value, int) else None
