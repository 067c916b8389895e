"""How many of a prompt's tokens an engine's prefix cache can serve: a ledger of the KV blocks it holds.

OpenVINO GenAI's continuous-batching pipeline (the ``local`` backend's engine) keeps the KV blocks of
finished sequences and, for a new request, restores its prompt's leading blocks whose whole prefix it
has seen: a block of ``block_size`` tokens is found by the hash of every token up to its end (the engine's
``restore_cached_blocks``), so reuse stops at the first block that differs, and the last prompt token is
always computed (its logits start the reply). Blocks are evicted least recently used when memory runs out.
The engine reports none of this, so :class:`PrefixLedger` follows the same rule on the token ids sent to it
and counts, per request, the prompt tokens it could take from the cache (``reused_tokens`` in the trace).

The count is an estimate, a lower bound except under memory pressure: whole blocks only (the engine may
also restore a partly filled last block), a sequence's blocks counted as cached once it has finished
(not while a request beside it still prefills them), and eviction modelled on the block count the
cache's size allows less the blocks running sequences hold (:meth:`PrefixLedger.holding`: the prompt tokens
not reused and the reply's budget, an upper bound: the engine allocates as it decodes, so the ledger may
evict earlier than the engine, and the count stays a lower bound). Why our own
and not a library: the engine keeps no counter, and the rule is a few lines over token ids. On the
2-core AVX2 machine a prompt whose first 992 of 1,024 tokens were sent before took as long as 32 new
tokens, so the CPU plugin's blocks are 32 tokens (``python benchmarks/prefix_reuse.py --blocks``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

#: tokens per KV block of OpenVINO's CPU plugin (measured: the module docstring)
BLOCK_SIZE = 32


class PrefixLedger:
    """The block hashes an engine's prefix cache holds, oldest use first (thread-safe).

    Args:
        block_size: tokens per KV block.
        capacity: blocks the cache holds at most (None: no eviction modelled).
    """

    def __init__(self, block_size: int = BLOCK_SIZE, capacity: int | None = None) -> None:
        if block_size < 1 or (capacity is not None and capacity < 1):
            raise ValueError(f"block_size and capacity must be >= 1, got {block_size} and {capacity}")
        self.block_size, self.capacity = block_size, capacity
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self._held = 0  # blocks running sequences hold (not evictable, not yet reusable)
        self._lock = threading.Lock()
        #: bumped by :meth:`clear`: a reply computed by an engine before it was replaced is not recorded
        self.epoch = 0

    def _hashes(self, ids: Sequence[int]) -> list[int]:
        """The chained hash of each whole block of ``ids`` (block i's covers tokens 0 .. end of block i)."""
        out, prev = [], 0
        for end in range(self.block_size, len(ids) + 1, self.block_size):
            prev = hash((prev, tuple(ids[end - self.block_size:end])))
            out.append(prev)
        return out

    def reusable(self, ids: Sequence[int]) -> int:
        """Prompt tokens of ``ids`` the cache can serve now: its leading whole blocks seen before, less the
        last prompt token, which is always computed. Marks the blocks found as just used."""
        found = 0
        with self._lock:
            for h in self._hashes(ids):
                if h not in self._blocks:
                    break
                self._blocks.move_to_end(h)
                found += 1
        return min(found * self.block_size, max(len(ids) - 1, 0))

    def record(self, ids: Sequence[int], epoch: int | None = None) -> None:
        """Note that the engine has computed ``ids`` (a prompt and its reply): their whole blocks are cached.
        ``epoch``: the ledger's epoch when the request was sent; a reply of an engine since replaced
        (the epoch moved on) is left out."""
        with self._lock:
            if epoch is not None and epoch != self.epoch:
                return
            for h in self._hashes(ids):
                self._blocks[h] = None
                self._blocks.move_to_end(h)
            self._evict()

    @contextmanager
    def holding(self, tokens: int) -> Iterator[int]:
        """While a request runs: it needs ``tokens`` new KV slots (its prompt tokens not reused and its reply's
        budget), whose blocks leave the cache's room, so cached blocks are evicted, least recently used first,
        where the two no longer fit; given back when it ends (done, cancelled or failed). Yields the blocks held."""
        blocks = -(-max(tokens, 0) // self.block_size)
        with self._lock:
            self._held += blocks
            self._evict()
        try:
            yield blocks
        finally:
            with self._lock:
                self._held -= blocks

    def _evict(self) -> None:
        """Drop the least recently used blocks beyond what the cache holds beside the running sequences'."""
        while self.capacity is not None and self._blocks and len(self._blocks) > max(self.capacity - self._held, 0):
            self._blocks.popitem(last=False)

    def clear(self) -> None:
        """Forget every block (the engine restarted with an empty cache)."""
        with self._lock:
            self._blocks.clear()
            self.epoch += 1

    def __len__(self) -> int:
        return len(self._blocks)


def kv_block_capacity(config: dict[str, object], cache_gb: int, kv_bytes: int, block_size: int = BLOCK_SIZE) -> int | None:
    """Blocks a KV cache of ``cache_gb`` GiB holds for a transformers ``config`` (layers, key/value heads,
    head size) at ``kv_bytes`` bytes a value; None where the config does not say."""
    try:
        layers = int(config["num_hidden_layers"])  # type: ignore[call-overload]
        heads = int(config.get("num_attention_heads"))  # type: ignore[call-overload]
        kv_heads = int(config.get("num_key_value_heads") or heads)  # type: ignore[call-overload]
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)  # type: ignore[call-overload]
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    per_block = layers * 2 * kv_heads * head_dim * kv_bytes * block_size
    return max(1, cache_gb * 2**30 // per_block) if per_block > 0 else None
