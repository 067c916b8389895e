"""The ``local`` backend's default engine: OpenVINO GenAI with continuous batching and prefix caching.

:class:`OVLLM` runs an OpenVINO export of the converted model (:func:`tandem.llm.local.ensure_exported`)
in a ``ContinuousBatchingPipeline`` stepped by the loop of :mod:`tandem.llm.ov_worker`, on an engine
thread, or in an engine process of its own (``engine_process``; a server's choice: openvino-genai holds
the GIL through each step, so in-process the caller's other threads wait for it):

- every :meth:`OVLLM.complete` call, from any thread, sends its request; the engine adds it
  to the running batch at the next step, so the eval runner's and the server's concurrent requests
  decode together (continuous batching), each with its own grammar and stop strings;
- prefix caching keeps the KV blocks of prompts already seen: a role's instructions and
  demonstrations, and a question's growing prefix across a method's steps, are computed once;
- a greedy request whose schema has long strings decodes under a grammar without their upper bounds
  and continues from the token before the step a string passes its bound, under the grammar of the
  rest of the reply (:mod:`tandem.llm.json_grammar`): the bounded grammar's reply at the speed of
  an unbounded one (``relax_strings``);
- OpenVINO's CPU plugin picks its kernels for the CPU it runs on (AVX2, AVX-512 BF16/VNNI, AMX) and
  computes in the ``dtype`` given (:data:`tandem.llm.local.OPENVINO_DEFAULTS`), else bf16 where the CPU has it;
- ``prompt_lookup``: a step may draft tokens copied from the prompt and check them in one pass.

Prompts are the same token ids the transformers engine builds (:func:`tandem.llm.hf.chat_token_ids`),
so prompt and completion token counts mean the same thing on both engines. A request's JSON schema
becomes an EBNF grammar without free whitespace (:func:`tandem.llm.structured.json_ebnf`).

Methods that work on input embeddings (R²AG) and training use the model in transformers: ``model``,
``embed_ids``, ``generate_from_embeds``, ... load :class:`HFLLM` on the converted folder at first use.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from tandem.errors import ConfigError, LLMError
from tandem.llm.base import LLMRequest, LLMResponse, Message, truncate_at_stop, with_json_instruction
from tandem.llm.cpus import cpu_kind, idle_cpus
from tandem.llm.hf import HFLLM, JSON_MODES, chat_token_ids, end_of_turn_ids, requested_threads
from tandem.llm.ov_messages import Params, Stats, token_bytes
from tandem.llm.ov_process import EngineProcess
from tandem.llm.prefix_ledger import PrefixLedger, kv_block_capacity
from tandem.model_files import offline_env
from tandem.types import current_observer

log = logging.getLogger(__name__)

# ``dtype`` option -> OpenVINO's inference precision (default: the plugin's choice, bf16 where the CPU has it)
PRECISIONS = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
#: ``kv_cache`` option -> the CPU plugin's KV_CACHE_PRECISION (its own default there is u8)
KV_PRECISIONS = {"u8": "u8", "float16": "f16", "bfloat16": "bf16", "float32": "f32"}
KV_BYTES = {"u8": 1, "float16": 2, "bfloat16": 2, "float32": 4}
DEFAULT_KV_CACHE = "u8"
DEFAULT_MAX_BATCH = 16
DEFAULT_KV_CACHE_GB = 1
DEFAULT_STEP_TOKENS = 512


class OVLLM:
    """A causal LM exported to OpenVINO, served to many threads by one continuous-batching engine.

    Args:
        model_dir: the OpenVINO export (``openvino_model.xml`` and config files).
        torch_dir: the transformers folder it was exported from (tokenizer, chat template, and the
            model for the embeddings path), or one with the tokenizer and config only (``weights_dir``).
        weights_dir: makes and returns the transformers folder with weights, where ``torch_dir`` has none
            (called at the first use of the embeddings path).
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
        prompt_lookup: prompt-lookup decoding, up to this many tokens drafted a step from the prompt (the
            tokens that followed the reply's last n-gram there), checked in one pass; 0: off.
        engine_process: step the pipeline in a process of its own (:mod:`tandem.llm.ov_worker`; what
            ``tandem serve`` and ``tandem mcp`` ask for): openvino-genai holds the GIL through each step,
            so on a thread of this process (the default) every other thread waits for up to a step;
            there, the caller's work no longer shares the cores with the engine's steps, which gave
            the higher throughput of the two with many questions at once (docs/openvino.md).

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
        prompt_lookup: int = 0,
        engine_process: bool = False,
        weights_dir: Callable[[], str | Path] | None = None,
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
        for key, flag in (("relax_strings", relax_strings), ("engine_process", engine_process)):
            if not isinstance(flag, bool):
                raise ConfigError(f"{key} is true or false, got {flag!r}")
        for key, value in (("max_batch", max_batch), ("kv_cache_gb", kv_cache_gb), ("step_tokens", step_tokens),
                           ("dynamic_quantization", 0 if dynamic_quantization is None else dynamic_quantization),
                           ("prompt_lookup", prompt_lookup)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{key} is a whole number >= 0, got {value!r}")
        if max_batch < 1 or kv_cache_gb < 1:
            raise ConfigError(f"max_batch and kv_cache_gb must be >= 1, got {max_batch} and {kv_cache_gb}")
        if step_tokens < max_batch:
            raise ConfigError(f"step_tokens must be >= max_batch ({max_batch}): each step decodes a token of every "
                              f"running sequence; got {step_tokens}")
        offline_env()
        self.spec, self.name, self.json_mode = spec, name, json_mode
        self.path, self.torch_path = str(model_dir), str(torch_dir)
        self._weights_dir = weights_dir
        self._torch_dtype = dtype or "float32"  # the embeddings path computes in the engine's precision
        self.threads = requested_threads(num_threads) or idle_cpus()
        props: dict[str, Any] = {"INFERENCE_NUM_THREADS": self.threads, "CACHE_DIR": str(Path(model_dir) / "compiled"),
                                 "KV_CACHE_PRECISION": KV_PRECISIONS[kv_cache]}
        if dtype is not None:
            props["INFERENCE_PRECISION_HINT"] = PRECISIONS[dtype]
        if dynamic_quantization is not None:
            props["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = dynamic_quantization
        self._init: dict[str, Any] = {"path": self.path, "spec": spec, "props": props, "kv_cache_gb": kv_cache_gb,
                                      "max_batch": max_batch, "step_tokens": step_tokens, "prompt_lookup": prompt_lookup}
        self._process = engine_process
        worker = EngineProcess(self._init, spec, engine_process)  # loads the model while the tokenizer loads here
        try:
            from transformers import AutoTokenizer, GenerationConfig

            self.tokenizer: Any = AutoTokenizer.from_pretrained(self.torch_path)
            self.eos_token_ids = end_of_turn_ids(self.tokenizer, GenerationConfig.from_pretrained(self.torch_path),
                                                 spec)
            # byte-level BPE tokens only (SmolLM2's, Qwen2.5's): the worker follows replies byte by byte for
            # stop strings and relaxed strings; other tokenizers leave both to OpenVINO GenAI
            table = token_bytes(self.tokenizer)
            self._token_bytes = table if relax_strings else None
        except BaseException:
            worker.kill()
            raise
        self.pad_token_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_token_ids[0]
        )
        #: what computes the replies, recorded in a run's config.json notes
        self.engine_note = (f"openvino {Path(model_dir).name}, dtype={dtype or 'the plugin default'}, kv_cache={kv_cache}, "
                            f"dynamic_quantization={'the plugin default' if dynamic_quantization is None else dynamic_quantization}, "
                            f"relax_strings={self._token_bytes is not None}, prompt_lookup={prompt_lookup}, "
                            f"{self.threads} threads, cpu={cpu_kind()}"
                            f"{', engine process' if engine_process else ''}")
        config = _model_config(self.torch_path)
        window = config.get("max_position_embeddings")
        self.context_window: int | None = window if isinstance(window, int) else None
        #: what the engine's prefix cache holds, to count each request's reused prompt tokens
        self.ledger = PrefixLedger(capacity=kv_block_capacity(config, kv_cache_gb, KV_BYTES[kv_cache]))
        self._tokens = ("tokens", list(self.eos_token_ids), table)
        self.peak_batch = 0
        self.relaxed_requests = self.continuations = 0
        self._tok_lock = threading.Lock()  # fast tokenizers are not safe to call from several threads
        self._torch: HFLLM | None = None
        self._torch_lock = threading.Lock()
        self._ids = itertools.count()
        self._lock = threading.Lock()  # the engine process, its socket and the requests it has
        self._waiting: dict[int, tuple[Future[tuple[list[int], str]], EngineProcess]] = {}  # by request id
        self._closed = False
        self._finalizer: weakref.finalize | None = None
        with self._lock:
            self._start(worker)

    #: concurrent requests decode together in the engine's batch (:func:`tandem.llm.base.batches`)
    batches = True
    #: prompt prefixes computed once are reused (:func:`tandem.llm.base.caches_prefixes`)
    caches_prefixes = True
    #: a ``first_tokens`` request gets the likeliest first tokens (:func:`tandem.llm.base.tells_first_tokens`)
    tells_first_tokens = True

    @property
    def constrains_json(self) -> bool:
        """True when requests with a JSON schema are decoded under it (``json_mode="schema"``)."""
        return self.json_mode == "schema"

    # -- chat completion ---------------------------------------------------------------------

    def complete(self, req: LLMRequest) -> LLMResponse:
        """Greedy (``temperature == 0``) or seeded sampling generation for one chat request; blocks
        until done while other threads' requests decode in the same batch. When the question it serves
        is cancelled while it waits (:class:`tandem.types.TraceObserver`: the server's client went away,
        or the server is stopping), the request leaves the batch and :class:`tandem.errors.Cancelled`
        is raised."""
        constrained = req.json_schema is not None and self.constrains_json
        messages = req.messages if constrained else with_json_instruction(req)
        with self._tok_lock:
            ids = chat_token_ids(self.tokenizer, messages)
        params = Params(req.max_tokens, tuple(req.stop), req.temperature, req.seed,
                        req.json_schema if constrained else None,
                        relaxed=constrained and req.temperature == 0 and self._token_bytes is not None,
                        first_tokens=req.first_tokens)
        start = time.perf_counter()
        observer = current_observer()
        rid, future, reused, epoch = self._submit(ids, params)
        with self.ledger.holding(len(ids) - reused + params.max_tokens):  # its blocks leave the cache's room
            while True:
                try:  # wake now and then: a Ctrl-C that the OS gave to another thread is raised here
                    new_ids, _status = future.result(timeout=0.5)
                    break
                except TimeoutError:
                    if observer is not None and observer.cancelled.is_set():  # the question was cancelled
                        self._cancel(rid)
                        observer.check()
        latency = time.perf_counter() - start
        if req.first_tokens:
            return self._first_tokens(ids, new_ids, reused, latency, epoch)
        self.ledger.record(ids + new_ids[:-1], epoch)  # the last token sampled never ran through the model
        ended = bool(new_ids) and new_ids[-1] in self.eos_token_ids
        with self._tok_lock:
            raw = str(self.tokenizer.decode(new_ids[:-1] if ended else new_ids, skip_special_tokens=True))
        text, hit_stop = truncate_at_stop(raw, req.stop)
        return LLMResponse(
            text=text,
            prompt_tokens=len(ids),
            completion_tokens=len(new_ids),
            reused_tokens=reused,
            latency_s=latency,
            finish_reason="stop" if (ended or hit_stop) else "length",
            model=self.name,
            constrained=constrained,
        )

    def _first_tokens(self, ids: list[int], top: list[tuple[int, float]], reused: int, latency: float,
                      epoch: int) -> LLMResponse:
        """The reply to a ``first_tokens`` request: the beams' tokens (text, log-probability), likeliest first."""
        self.ledger.record(ids, epoch)
        with self._tok_lock:
            pairs = tuple((str(self.tokenizer.decode([token])), score) for token, score in sorted(top, key=lambda t: -t[1]))
        return LLMResponse(text=pairs[0][0] if pairs else "", prompt_tokens=len(ids), completion_tokens=1,
                           reused_tokens=reused, latency_s=latency, finish_reason="length", model=self.name,
                           first_tokens=pairs)

    def count_tokens(self, text: str) -> int:
        """Number of tokens of ``text`` (no special tokens added)."""
        with self._tok_lock:
            return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def close(self) -> None:
        """Stop the engine process (requests already sent are answered first)."""
        with self._lock:
            self._closed = True
            worker = self._worker
        if worker is not None:
            worker.stop()

    # -- the engine process --------------------------------------------------------------------

    def _start(self, worker: EngineProcess | None = None) -> None:
        """Wait until the engine process (a new one unless given) has loaded the model (holding ``_lock``)."""
        worker = worker or EngineProcess(self._init, self.spec, self._process)
        worker.ready(self._tokens, functools.partial(self._answer, worker), waiting=lambda: len(self._waiting))
        self.ledger.clear()  # a new engine starts with an empty cache
        self._worker = worker
        if self._finalizer is not None:
            self._finalizer.detach()  # the engine it stopped has ended
        self._finalizer = weakref.finalize(self, worker.kill)

    def _submit(self, ids: list[int], params: Params) -> tuple[int, Future[tuple[list[int], str]], int, int]:
        """Send a request (a new engine if it had ended): its id, reply, reusable prompt tokens, ledger epoch."""
        future: Future[tuple[list[int], str]] = Future()
        with self._lock:
            if self._closed:
                raise LLMError(f"{self.spec}: the engine is closed")
            if not self._worker.alive:
                log.warning("%s: the engine process had ended (%s); starting a new one", self.spec, self._worker.ended)
                self._start()
            rid, reused, epoch = next(self._ids), self.ledger.reusable(ids), self.ledger.epoch
            self._waiting[rid] = (future, self._worker)
            try:
                self._worker.send(("job", rid, ids, params))
            except OSError as exc:
                del self._waiting[rid]
                raise LLMError(f"{self.spec}: the engine process is gone ({exc}); the next request starts a new one") \
                    from exc
        return rid, future, reused, epoch

    def _cancel(self, rid: int) -> None:
        """Stop waiting for request ``rid`` and have the engine drop it from its batch."""
        with self._lock:
            self._waiting.pop(rid, None)
            try:
                self._worker.send(("cancel", rid))
            except OSError:
                pass  # the engine is gone: nothing runs the request

    def _answer(self, worker: EngineProcess, message: tuple[Any, ...] | None, ended: str = "") -> None:
        """A reply from the engine process ``worker`` (called on its reader thread); None: the process
        ended, so every request still waiting on it fails (not those a new engine already runs)."""
        if message is None:
            with self._lock:
                lost = [rid for rid, (_, sent_to) in self._waiting.items() if sent_to is worker]
                futures = [self._waiting.pop(rid)[0] for rid in lost]
            for future in futures:
                future.set_exception(LLMError(f"{self.spec}: the engine process ended ({ended}) before replying"))
            return
        with self._lock:
            future, _ = self._waiting.pop(message[1], (None, None))
        if future is None:
            return
        if message[0] == "error":
            future.set_exception(LLMError(message[2]))
            return
        _, _, tokens, status, stats = message
        assert isinstance(stats, Stats)
        self.peak_batch = max(self.peak_batch, stats.peak_batch)
        self.relaxed_requests += stats.relaxed
        self.continuations += stats.continuations
        future.set_result((tokens, status))

    # -- the transformers model, for embeddings and training -----------------------------------

    @property
    def torch_llm(self) -> HFLLM:
        """:class:`HFLLM` on the converted folder, in the engine's ``dtype`` (f32 where none was given), loaded at
        first use (embeddings path, training); for a GGUF
        OpenVINO reads itself the folder holds no weights, and the model is converted then (``weights_dir``)."""
        with self._torch_lock:
            if self._torch is None:
                folder = self._weights_dir() if self._weights_dir is not None else self.torch_path
                self._torch = HFLLM(str(folder), spec=self.spec, name=self.name, num_threads=self.threads,
                                    json_mode=self.json_mode, dtype=self._torch_dtype)
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


def _model_config(folder: str) -> dict[str, Any]:
    """The transformers ``config.json`` of ``folder`` ({} where it cannot be read)."""
    try:
        data = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
