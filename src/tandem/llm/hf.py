"""In-process transformers causal LM: chat generation plus access to embeddings and hidden states.

The ``local`` backend is this class on the embedded SmolLM2 converted once into a cache folder
(see :mod:`tandem.llm.local`). Generation runs one request at a time per instance (a lock), which
is what a CPU can do anyway; callers may still call :meth:`HFLLM.complete` from many threads.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
)

from tandem.errors import ConfigError, ModelNotFoundError
from tandem.llm.base import (
    LLMRequest,
    LLMResponse,
    Message,
    truncate_at_stop,
    with_json_instruction,
)
from tandem.llm.structured import JSONConstraint
from tandem.model_files import offline_env, resolve_model

# Tokens that end an assistant turn in common chat templates; any present in the vocabulary is
# added to the model's own eos ids (a GGUF conversion may report the wrong one).
END_OF_TURN_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>", "</s>")
_DTYPES = ("float32", "bfloat16", "float16")
JSON_MODES = ("schema", "prompt")


def chat_token_ids(tokenizer: Any, messages: Sequence[Message], add_generation_prompt: bool = True) -> list[int]:
    """Token ids of ``messages`` through the tokenizer's chat template (with the generation prompt).

    Without a chat template the contents are joined by blank lines (base models). Shared by every
    in-process engine, so prompts and token counts are the same whichever engine runs them.
    """
    dicts = [m.to_dict() for m in messages]
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(dicts, add_generation_prompt=add_generation_prompt, tokenize=False)
    else:
        text = "\n\n".join(m["content"] for m in dicts)
        if add_generation_prompt:
            text += "\n\n"
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def end_of_turn_ids(tokenizer: Any, generation_config: Any, spec: str) -> list[int]:
    """Token ids that end generation: :data:`END_OF_TURN_TOKENS` present in the vocabulary, then the
    generation config's and the tokenizer's own eos ids. ConfigError when there is none."""
    ids: list[int] = []
    vocab = tokenizer.get_vocab()
    for tok in END_OF_TURN_TOKENS:
        if tok in vocab:
            ids.append(int(vocab[tok]))
    gen_eos = getattr(generation_config, "eos_token_id", None)
    for value in (gen_eos if isinstance(gen_eos, list) else [gen_eos]) + [tokenizer.eos_token_id]:
        if value is not None and int(value) not in ids:
            ids.append(int(value))
    if not ids:
        raise ConfigError(f"{spec}: the tokenizer has no end-of-turn token; cannot stop generation")
    return ids


def requested_threads(num_threads: int | None) -> int | None:
    """Threads asked for: ``num_threads`` if given, else ``$TANDEM_LLM_THREADS`` if set, else None."""
    env = os.environ.get("TANDEM_LLM_THREADS", "").strip()
    if not num_threads and env:
        try:
            num_threads = int(env)
        except ValueError as exc:
            raise ConfigError(f"TANDEM_LLM_THREADS must be an integer, got {env!r}") from exc
    return max(1, int(num_threads)) if num_threads else None


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask), at least 1."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def configure_threads(num_threads: int | None) -> int:
    """Set torch's intra-op threads (process-wide) and return the number in force.

    ``num_threads`` if given, else ``$TANDEM_LLM_THREADS`` if set, else torch's own default capped
    at the CPUs this process may use. On a busy machine fewer threads are much faster: torch's
    threads wait for each other at every operation (see docs/llm.md).
    """
    target = requested_threads(num_threads) or min(torch.get_num_threads(), available_cpus())
    if target != torch.get_num_threads():
        torch.set_num_threads(max(1, target))
    return torch.get_num_threads()


class HFLLM:
    """A transformers causal LM loaded from a local folder (or a hub name already in the local cache).

    ``json_mode``: ``"schema"`` (default) decodes a request's JSON schema with a grammar
    (llguidance, :mod:`tandem.llm.structured`), so the reply is valid JSON for it; ``"prompt"`` only
    appends the schema to the prompt as an instruction.

    Attributes:
        tokenizer, model: the loaded transformers objects (``model`` is in eval mode).
        eos_token_ids: token ids that end generation.
    """

    def __init__(
        self,
        path: str,
        *,
        spec: str | None = None,
        name: str | None = None,
        dtype: str = "float32",
        num_threads: int | None = None,
        trust_remote_code: bool = False,
        json_mode: str = "schema",
    ) -> None:
        if json_mode not in JSON_MODES:
            raise ConfigError(f"unknown json_mode {json_mode!r} for an in-process model; modes: {sorted(JSON_MODES)}")
        if dtype not in _DTYPES:
            raise ConfigError(f"unknown dtype {dtype!r}; dtypes: {sorted(_DTYPES)}")
        offline_env()
        self.threads = configure_threads(num_threads)
        #: what computes the replies, recorded in a run's config.json notes
        self.engine_note = f"transformers, {dtype}, {self.threads} threads"
        resolved = resolve_model(path)
        try:
            self.tokenizer: Any = AutoTokenizer.from_pretrained(resolved, trust_remote_code=trust_remote_code)
            self.model: Any = AutoModelForCausalLM.from_pretrained(
                resolved, dtype=getattr(torch, dtype), trust_remote_code=trust_remote_code
            )
        except OSError as exc:
            raise ModelNotFoundError(
                f"cannot load a causal LM from {path!r} offline (a local folder, or a hub name already "
                f"in the local cache): {exc}"
            ) from exc
        self.model.eval()
        self.name = name or os.path.basename(str(resolved).rstrip("/")) or str(resolved)
        self.spec = spec or f"hf:{path}"
        self.path = str(resolved)
        self.eos_token_ids = self._eos_ids()
        self.pad_token_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_token_ids[0]
        )
        self._lock = threading.RLock()
        self.json_mode = json_mode
        # prompts longer than this are cut by the methods (tandem.llm.base.fit_to_context)
        self.context_window: int | None = getattr(self.model.config, "max_position_embeddings", None)
        self._constraint: JSONConstraint | None = None

    @property
    def constrains_json(self) -> bool:
        """True when requests with a JSON schema are decoded under it (``json_mode="schema"``)."""
        return self.json_mode == "schema"

    # -- chat completion ---------------------------------------------------------------------

    def complete(self, req: LLMRequest) -> LLMResponse:
        """Greedy (``temperature == 0``) or seeded sampling generation for one chat request.

        A JSON schema in the request constrains decoding (``json_mode="schema"``) or becomes an
        instruction in the prompt (``"prompt"``).
        """
        constrained = req.json_schema is not None and self.constrains_json
        with self._lock:  # fast tokenizers are not safe to call from several threads at once
            input_ids = self.encode_chat(req.messages if constrained else with_json_instruction(req))
            if req.first_tokens:
                return self._first_tokens(input_ids, req.first_tokens)
            processors = []
            if constrained:
                if self._constraint is None:
                    self._constraint = JSONConstraint(self.tokenizer, self.eos_token_ids)
                processors.append(self._constraint.processor(req.json_schema, int(input_ids.shape[1])))
            return self._generate(
                {"input_ids": input_ids, "attention_mask": _ones_like(input_ids)},
                prompt_tokens=int(input_ids.shape[1]),
                req=req,
                processors=processors,
            )

    #: a ``first_tokens`` request gets the likeliest first tokens (:func:`tandem.llm.base.tells_first_tokens`)
    tells_first_tokens = True

    def _first_tokens(self, input_ids: torch.Tensor, k: int) -> LLMResponse:
        """The ``k`` likeliest first tokens of the reply to ``input_ids`` and their log-probabilities (one forward)."""
        start = time.perf_counter()
        with torch.no_grad():
            logits = self.model(input_ids=input_ids, attention_mask=_ones_like(input_ids)).logits[0, -1].float()
        top = torch.topk(torch.log_softmax(logits, -1), k)
        pairs = tuple((str(self.tokenizer.decode([int(t)])), float(lp)) for lp, t in zip(top.values, top.indices, strict=True))
        return LLMResponse(text=pairs[0][0], prompt_tokens=int(input_ids.shape[1]), completion_tokens=1,
                           latency_s=time.perf_counter() - start, finish_reason="length", model=self.name,
                           first_tokens=pairs)

    def encode_chat(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> torch.Tensor:
        """Token ids (shape ``[1, n]``) of ``messages`` through the tokenizer's chat template
        (:func:`chat_token_ids`)."""
        return torch.tensor([chat_token_ids(self.tokenizer, messages, add_generation_prompt)], dtype=torch.long)

    def count_tokens(self, text: str) -> int:
        """Number of tokens of ``text`` (no special tokens added)."""
        with self._lock:
            return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    # -- embeddings and hidden states (for methods that inject embeddings, and training) -------

    def input_embeddings(self) -> torch.nn.Module:
        """The model's token embedding layer (``ids -> [.., hidden]``)."""
        return self.model.get_input_embeddings()

    def embed_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Embeddings of ``input_ids``, shape ``[batch, n, hidden]`` (gradients are left on: callers decide)."""
        return self.input_embeddings()(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        *,
        inputs_embeds: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        output_hidden_states: bool = True,
        **kwargs: Any,
    ) -> Any:
        """One forward pass; returns the transformers output (``logits``, ``hidden_states``, ...).

        Gradients are not disabled here, so training code can backpropagate through it.
        """
        with self._lock:
            return self.model(
                input_ids=input_ids,
                inputs_embeds=inputs_embeds,
                attention_mask=attention_mask,
                output_hidden_states=output_hidden_states,
                **kwargs,
            )

    def generate_from_embeds(
        self,
        inputs_embeds: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
        max_tokens: int = 256,
        temperature: float = 0.0,
        stop: Sequence[str] = (),
        seed: int | None = None,
    ) -> LLMResponse:
        """Generate from prompt embeddings ``[1, n, hidden]`` (e.g. soft prompts spliced into text)."""
        if inputs_embeds.dim() != 3 or inputs_embeds.shape[0] != 1:
            raise ConfigError(f"inputs_embeds must have shape [1, n, hidden], got {tuple(inputs_embeds.shape)}")
        if attention_mask is None:
            attention_mask = torch.ones(inputs_embeds.shape[:2], dtype=torch.long)
        req = LLMRequest(
            messages=(Message("user", "<embeddings>"),),
            max_tokens=max_tokens,
            temperature=temperature,
            stop=tuple(stop),
            seed=seed,
        )
        return self._generate(
            {"inputs_embeds": inputs_embeds, "attention_mask": attention_mask},
            prompt_tokens=int(inputs_embeds.shape[1]),
            req=req,
        )

    # -- internals -----------------------------------------------------------------------------

    def _eos_ids(self) -> list[int]:
        return end_of_turn_ids(self.tokenizer, self.model.generation_config, self.spec)

    def _generate(self, inputs: dict[str, Any], *, prompt_tokens: int, req: LLMRequest,
                  processors: Sequence[Any] = ()) -> LLMResponse:
        sampling = req.temperature > 0
        config = GenerationConfig(
            max_new_tokens=req.max_tokens,
            do_sample=sampling,
            temperature=req.temperature if sampling else None,
            top_p=None,
            top_k=None,
            eos_token_id=self.eos_token_ids,
            pad_token_id=self.pad_token_id,
        )
        criteria = StoppingCriteriaList()
        uses_ids = "input_ids" in inputs
        offset = prompt_tokens if uses_ids else 0
        if req.stop:
            criteria.append(_StopOnStrings(self.tokenizer, req.stop, offset))
        start = time.perf_counter()
        with self._lock, torch.inference_mode():
            if sampling and req.seed is not None:
                torch.manual_seed(req.seed)
            out = self.model.generate(**inputs, generation_config=config, stopping_criteria=criteria,
                                      logits_processor=LogitsProcessorList(processors))
        latency = time.perf_counter() - start
        new_ids = out[0, offset:].tolist()
        ended = bool(new_ids) and new_ids[-1] in self.eos_token_ids
        raw = str(self.tokenizer.decode(new_ids[:-1] if ended else new_ids, skip_special_tokens=True))
        text, hit_stop = truncate_at_stop(raw, req.stop)
        return LLMResponse(
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=len(new_ids),
            latency_s=latency,
            finish_reason="stop" if (ended or hit_stop) else "length",
            model=self.name,
            constrained=bool(processors),
        )

    def __repr__(self) -> str:
        return f"HFLLM(name={self.name!r}, path={self.path!r})"


class _StopOnStrings(StoppingCriteria):
    """Stopping criterion: stop once the generated text contains any of the stop strings."""

    def __init__(self, tokenizer: Any, stop: Sequence[str], offset: int) -> None:
        self.tokenizer = tokenizer
        self.stop = tuple(stop)
        self.offset = offset

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        done = []
        for row in input_ids:
            text = self.tokenizer.decode(row[self.offset :], skip_special_tokens=True)
            done.append(any(s in text for s in self.stop))
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def _ones_like(ids: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(ids, dtype=torch.long)
