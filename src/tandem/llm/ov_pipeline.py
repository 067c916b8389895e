"""The OpenVINO GenAI pipelines the engine's worker (:mod:`tandem.llm.ov_worker`) steps, built from the
init message :class:`tandem.llm.ov_engine.OVLLM` sends it: the model's folder, the CPU plugin's
properties, the KV cache's size, the batch's bounds and, where asked, prompt-lookup decoding."""

from __future__ import annotations

from typing import Any


def load(init: dict[str, Any]) -> tuple[Any, Any]:
    """The pipeline of an init message (on ``init["path"]`` with its scheduler and plugin properties) and
    the ``openvino_genai`` module. Raises RuntimeError where OpenVINO cannot load it."""
    import openvino_genai as ovg

    return pipeline(ovg, init, lookup=bool(init.get("prompt_lookup"))), ovg


def pipeline(ovg: Any, init: dict[str, Any], lookup: bool) -> Any:
    """A continuous-batching pipeline of ``init``'s model, decoding by prompt lookup where ``lookup``; the
    plain one (for first-token beams beside a prompt-lookup one) gets the smallest KV cache (1 GB)."""
    scheduler = ovg.SchedulerConfig()
    scheduler.enable_prefix_caching = True
    scheduler.cache_size = init["kv_cache_gb"] if lookup or not init.get("prompt_lookup") else 1
    scheduler.max_num_seqs = init["max_batch"]
    scheduler.max_num_batched_tokens = init["step_tokens"]
    scheduler.dynamic_split_fuse = True
    props = {**init["props"], "prompt_lookup": True} if lookup else init["props"]
    return ovg.ContinuousBatchingPipeline(init["path"], scheduler, "CPU", props)
