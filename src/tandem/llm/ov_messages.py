"""What the OpenVINO engine (:mod:`tandem.llm.ov_engine`) and its worker process (:mod:`tandem.llm.ov_worker`)
send each other: a request's decoding parameters, a finished request's figures, and the token-bytes table
the worker looks for stop strings with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Params:
    """What the worker needs of a chat request to decode it (picklable; the prompt's ids travel beside it)."""

    max_tokens: int
    stop: tuple[str, ...] = ()
    temperature: float = 0.0
    seed: int | None = None
    json_schema: dict[str, Any] | None = None  # decode under it (None: free text)
    relaxed: bool = False  # decode the schema's long strings unbounded and continue at a bound
    first_tokens: int = 0  # >0: the likeliest first tokens with their log-probabilities, not a reply


@dataclass(frozen=True)
class Stats:
    """Per finished request: the most sequences in a step while it ran, whether it decoded relaxed, and
    its continuations at a string's bound."""

    peak_batch: int
    relaxed: bool
    continuations: int


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
