"""Cross-encoder reranking with sentence-transformers' CrossEncoder (e.g. BAAI/bge-reranker-v2-m3).

Any local path or hub name works where the weights are reachable; none ship offline, so this is
opt-in. ``min_score`` drops candidates at or below it (DualRAG keeps raw logits > 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from tandem.errors import ConfigError
from tandem.index.store import DocStore
from tandem.model_files import offline_env, resolve_model
from tandem.registry import RERANKERS
from tandem.rerank.base import ranked
from tandem.settings import Settings
from tandem.types import Hit


class CrossEncoderReranker:
    """score(q, d) = CrossEncoder([q, title + text]) as raw logits."""

    name = "cross_encoder"

    def __init__(self, model: str, store: DocStore, *, min_score: float | None = None, max_length: int = 512,
                 batch_size: int = 32) -> None:
        offline_env()
        from sentence_transformers import CrossEncoder

        from tandem.errors import ModelNotFoundError

        try:
            self.model = CrossEncoder(resolve_model(model), max_length=max_length, device="cpu")
        except OSError as exc:
            raise ModelNotFoundError(f"cannot load cross-encoder {model!r} offline: give a local path ({exc})") from exc
        self.store, self.min_score, self.batch_size = store, min_score, batch_size

    def rerank(self, query: str, hits: Sequence[Hit], k: int | None = None) -> list[Hit]:
        if not hits:
            return []
        ids = [h.doc_id for h in hits]
        pairs = [(query, self.store.get(d).contents) for d in ids]
        import torch

        scores = self.model.predict(pairs, batch_size=self.batch_size, activation_fn=torch.nn.Identity(),
                                    show_progress_bar=False)
        return ranked(ids, [float(s) for s in scores], self.name, k, self.min_score)


class CrossEncoderSettings(Settings):
    """Cross-encoder: a model reading query and passage together (any local folder or cached hub name)."""

    reranker_model: str | None = Field(None, description="the cross-encoder, e.g. BAAI/bge-reranker-v2-m3 (required)")
    min_score: float | None = Field(0.0, description="keep raw logits > min_score; null keeps all")


@RERANKERS.register("cross_encoder", settings=CrossEncoderSettings)
def build(s: Any, store: DocStore, index: Any = None) -> CrossEncoderReranker:
    """``reranker_model`` scoring raw logits, keeping those over ``min_score``."""
    if not s.reranker_model:
        raise ConfigError("reranker=cross_encoder needs reranker_model=PATH_OR_HUB_NAME (e.g. BAAI/bge-reranker-v2-m3)")
    return CrossEncoderReranker(s.reranker_model, store, min_score=s.min_score)
