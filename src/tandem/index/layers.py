"""Per-layer features of a BERT-style encoder, for CoopRAG's layer-contrast reranker (RaLa).

For every text, one forward pass with ``output_hidden_states=True`` gives, at each of the model's
hidden states (index 0 = embedding output, index L = last layer; MiniLM-L6 has L = 6):

- a **sentence vector per layer**, in two definitions (both stored, the reranker picks one):
  ``mean`` = mean over the text's tokens of that layer's hidden states (all-MiniLM-L6-v2 is trained
  with mean pooling, so ``mean`` at the last layer IS its sentence embedding), and ``cls`` = the
  hidden state of the real ``[CLS]`` token (position 0), which is what the authors' code reads
  (from all-mpnet-base-v2, itself a mean-pooled model);
- the **last-layer token vectors** (ColBERT-style late interaction), with a mask marking
  punctuation tokens (``PUNCTUATION``, the authors' list).

All vectors are L2-normalised. At index time (``rala_extras``) documents are stored beside the index
as fp16 arrays: ``rala_mean`` and ``rala_cls`` (n, L+1, dim), the token vectors of all documents as
one flat ``rala_tokens`` (T, dim) with ``rala_offsets`` (n+1,) (document i owns rows
offsets[i]:offsets[i+1]) and ``rala_punct`` (T,) uint8.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tandem.index.build import ExtraBuilder
from tandem.index.encoder import Encoder
from tandem.index.passage_graph import GraphExtra
from tandem.index.store import DocStore
from tandem.model_files import DEFAULT_ENCODER, offline_env, resolve_model
from tandem.types import OnProgress

PUNCTUATION = frozenset(",.?!:;-()\"'")
CLS_MODES = ("mean", "cls")
EXTRA_PREFIX = "rala"


@dataclass
class LayerFeatures:
    """Features of ``n`` texts; rows of ``tokens``/``punct`` for text i are ``offsets[i]:offsets[i+1]``."""

    mean: np.ndarray  # (n, L+1, dim) mean-pooled hidden state per layer, unit rows
    cls: np.ndarray  # (n, L+1, dim) [CLS] hidden state per layer, unit rows
    tokens: np.ndarray  # (T, dim) last-layer token vectors, unit rows
    offsets: np.ndarray  # (n+1,) int64
    punct: np.ndarray  # (T,) bool, True for punctuation tokens
    layer_tokens: np.ndarray | None = None  # (T, L+1, dim) every layer's token vectors (Eq. 3), when asked

    def sentence(self, mode: str) -> np.ndarray:
        """The per-layer sentence vectors of ``mode`` (``mean`` or ``cls``)."""
        return self.mean if mode == "mean" else self.cls

    @property
    def pooled(self) -> np.ndarray:
        """(n, dim) float32: the mean-pooled last layer, the model's sentence embedding."""
        return np.ascontiguousarray(self.mean[:, -1], dtype=np.float32)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def punctuation_ids(tokenizer: object) -> np.ndarray:
    """(vocab,) bool: which token ids are one of ``PUNCTUATION`` (scored as zero vectors on the document side)."""
    vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))  # type: ignore[attr-defined,arg-type]
    return np.array([t in PUNCTUATION for t in vocab], dtype=bool)


class LayerEncoder:
    """Loads the model folder of an encoder with transformers and returns ``LayerFeatures``."""

    def __init__(self, name: str = DEFAULT_ENCODER, *, max_length: int | None = None) -> None:
        offline_env()
        from transformers import AutoModel, AutoTokenizer

        self.name = name
        path = resolve_model(name)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval()
        self.max_length = max_length or _st_max_length(path) or 512
        self.layers = int(self.model.config.num_hidden_layers) + 1
        self.dim = int(self.model.config.hidden_size)
        self._punct_ids = punctuation_ids(self.tokenizer)

    def encode(self, texts: Sequence[str], *, batch_size: int = 32, all_layer_tokens: bool = False,
               on_progress: OnProgress | None = None) -> LayerFeatures:
        """Features of ``texts`` in order (batches are length-sorted for speed); ``on_progress(done, total)``
        after each batch, counting texts."""
        import torch

        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        parts: dict[int, tuple[np.ndarray, ...]] = {}
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                batch = order[start:start + batch_size]
                enc = self.tokenizer([texts[i] for i in batch], padding=True, truncation=True,
                                     max_length=self.max_length, return_tensors="pt")
                hidden = torch.stack(self.model(**enc, output_hidden_states=True).hidden_states, dim=1)
                for row, i in enumerate(batch):
                    parts[i] = self._one(hidden[row], enc["input_ids"][row], enc["attention_mask"][row], all_layer_tokens)
                if on_progress is not None:
                    on_progress(start + len(batch), len(texts))
        return _concat([parts[i] for i in range(len(texts))], self.layers, self.dim, all_layer_tokens)

    def _one(self, hidden: object, ids: object, mask: object, all_layer_tokens: bool) -> tuple[np.ndarray, ...]:
        """One text's (mean, cls, tokens, punct[, layer_tokens]) from its (L+1, seq, dim) hidden states."""
        n = int(mask.sum())  # type: ignore[attr-defined]
        h = hidden[:, :n].float().numpy()  # type: ignore[index]
        punct = self._punct_ids[ids[:n].numpy()]  # type: ignore[index]
        out = (_unit(h.mean(axis=1)), _unit(h[:, 0]), _unit(h[-1]), punct)
        return (*out, _unit(h).transpose(1, 0, 2)) if all_layer_tokens else out


def _concat(parts: list[tuple[np.ndarray, ...]], layers: int, dim: int, all_layer_tokens: bool) -> LayerFeatures:
    lengths = [p[2].shape[0] for p in parts]
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    empty = np.zeros((0, layers, dim), dtype=np.float32)
    return LayerFeatures(
        mean=np.stack([p[0] for p in parts]) if parts else empty,
        cls=np.stack([p[1] for p in parts]) if parts else empty,
        tokens=np.concatenate([p[2] for p in parts]) if parts else np.zeros((0, dim), np.float32),
        offsets=offsets,
        punct=np.concatenate([p[3] for p in parts]) if parts else np.zeros(0, bool),
        layer_tokens=np.concatenate([p[4] for p in parts]) if all_layer_tokens and parts else None,
    )


def _st_max_length(path: str) -> int | None:
    """``max_seq_length`` of a sentence-transformers folder, so documents are cut where the index's encoder cuts them."""
    import json
    from pathlib import Path

    config = Path(path) / "sentence_bert_config.json"
    if not config.exists():
        return None
    return int(json.loads(config.read_text(encoding="utf-8")).get("max_seq_length") or 0) or None


def features_to_extras(features: LayerFeatures) -> dict[str, np.ndarray]:
    """The arrays stored in an index folder (fp16 vectors, int64 offsets, uint8 mask)."""
    return {
        f"{EXTRA_PREFIX}_mean": features.mean.astype(np.float16),
        f"{EXTRA_PREFIX}_cls": features.cls.astype(np.float16),
        f"{EXTRA_PREFIX}_tokens": features.tokens.astype(np.float16),
        f"{EXTRA_PREFIX}_offsets": features.offsets.astype(np.int64),
        f"{EXTRA_PREFIX}_punct": features.punct.astype(np.uint8),
    }


def rala_extras(encoder: str | None = None, *, batch_size: int = 32,
                on_progress: OnProgress | None = None) -> ExtraBuilder:
    """An ``ExtraBuilder`` for ``build_index(..., extras=[rala_extras()])``: RaLa's document features
    (``on_progress(done, total)``: documents encoded).

    ``encoder`` defaults to the index's own encoder (its name or model path), so the stored
    features match the FAISS vectors.
    """

    def build(store: DocStore, enc: Encoder) -> dict[str, np.ndarray]:
        layer_encoder = LayerEncoder(encoder or enc.name)
        feats = layer_encoder.encode([d.contents for d in store.docs], batch_size=batch_size, on_progress=on_progress)
        return features_to_extras(feats)

    return build


# name -> factory of an ExtraBuilder (``tandem index --extras NAME``)
EXTRAS = {"rala": rala_extras, "graph": GraphExtra}
