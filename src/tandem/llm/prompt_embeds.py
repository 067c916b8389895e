"""Prompt embeddings to a served model (vLLM ``--enable-prompt-embeds``), for methods that inject vectors.

A server cannot splice a vector into a token prompt, so the client builds the whole prompt's embeddings
itself: it needs the served model's tokenizer and token embedding table locally (``embeddings_from``,
the same model's transformers folder). Only the embedding matrix is read from the safetensors files
when it can be found there; otherwise the model is loaded once and all but its embedding layer dropped.
The embeddings then go to ``POST /completions`` as ``prompt_embeds`` (see
:meth:`tandem.llm.openai_compat.OpenAILLM.complete_prompt_embeds`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from tandem.errors import ConfigError, ModelNotFoundError
from tandem.llm.base import LLMRequest, LLMResponse, Message
from tandem.llm.hf import END_OF_TURN_TOKENS
from tandem.llm.openai_compat import OpenAILLM
from tandem.model_files import offline_env, resolve_model

EMBED_KEYS = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight")


def load_embedding_table(folder: str | Path) -> torch.nn.Embedding:
    """The token embedding layer of the model in ``folder`` (frozen)."""
    path = Path(folder)
    files = sorted(path.glob("*.safetensors"))
    if files:
        from safetensors import safe_open

        for file in files:
            with safe_open(str(file), framework="pt") as handle:
                key = next((k for k in handle.keys() if k.endswith(EMBED_KEYS)), None)  # noqa: SIM118
                if key is not None:
                    return torch.nn.Embedding.from_pretrained(handle.get_tensor(key).float(), freeze=True)
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    except OSError as exc:
        raise ModelNotFoundError(f"cannot read token embeddings from {folder!r}: {exc}") from exc
    return torch.nn.Embedding.from_pretrained(model.get_input_embeddings().weight.detach().clone(), freeze=True)


class PromptEmbedsLLM:
    """An :class:`OpenAILLM` plus a local tokenizer and embedding table: the embeddings interface of
    :class:`tandem.llm.hf.HFLLM` (``tokenizer``, ``eos_token_ids``, ``input_embeddings``, ``embed_ids``,
    ``generate_from_embeds``) over a vLLM server. Plain chat requests go to the server as usual."""

    def __init__(self, server: OpenAILLM, embeddings_from: str | Path) -> None:
        offline_env()
        from transformers import AutoTokenizer

        folder = resolve_model(str(embeddings_from))
        if folder.endswith(".gguf"):  # an embedded GGUF (e.g. smollm2): its converted transformers folder
            from tandem.llm.local import ensure_converted

            folder = str(ensure_converted(str(embeddings_from)))
        try:
            self.tokenizer: Any = AutoTokenizer.from_pretrained(folder)
        except OSError as exc:
            raise ModelNotFoundError(f"cannot load a tokenizer from {embeddings_from!r}: {exc}") from exc
        self.server, self.name, self.spec = server, server.name, server.spec
        self.embedding = load_embedding_table(folder)
        vocab = self.tokenizer.get_vocab()
        self.eos_token_ids = [int(vocab[t]) for t in END_OF_TURN_TOKENS if t in vocab] or (
            [int(self.tokenizer.eos_token_id)] if self.tokenizer.eos_token_id is not None else [])
        config = Path(folder) / "config.json"
        self.model_config = json.loads(config.read_text()) if config.is_file() else {}

    def complete(self, req: LLMRequest) -> LLMResponse:
        """A chat request, sent to the server unchanged."""
        return self.server.complete(req)

    def input_embeddings(self) -> torch.nn.Module:
        """The local copy of the served model's token embedding layer."""
        return self.embedding

    def embed_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Embeddings of ``input_ids`` (``[batch, n]`` -> ``[batch, n, hidden]``)."""
        return self.embedding(input_ids)

    def generate_from_embeds(self, inputs_embeds: torch.Tensor, *, attention_mask: torch.Tensor | None = None,
                             max_tokens: int = 256, temperature: float = 0.0, stop: Sequence[str] = (),
                             seed: int | None = None) -> LLMResponse:
        """Send ``[1, n, hidden]`` embeddings as vLLM prompt embeddings; the server generates."""
        if inputs_embeds.dim() != 3 or inputs_embeds.shape[0] != 1:
            raise ConfigError(f"inputs_embeds must have shape [1, n, hidden], got {tuple(inputs_embeds.shape)}")
        if attention_mask is not None and not bool(attention_mask.all()):
            raise ConfigError("prompt embeddings sent to a server cannot carry padding")
        req = LLMRequest(messages=(Message("user", "<embeddings>"),), max_tokens=max_tokens, temperature=temperature,
                         stop=tuple(stop), seed=seed)
        return self.server.complete_prompt_embeds(inputs_embeds[0], req)

    def __repr__(self) -> str:
        return f"PromptEmbedsLLM({self.server!r})"
