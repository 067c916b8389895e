"""The two scores s(U, D) that retriever fine-tuning can put inside its InfoNCE logit (``--score``).

- ``cosine``: cos(E(U), E(D)), E the model's own sentence embedding (mean pooling for MiniLM), i.e.
  the dense first stage the FAISS index uses.
- ``rala`` (the paper's training logit, methods.md §1.4 "Code definition used in training"): RaLa's
  Eq. 4 computed differentiably from the encoder's hidden states, exactly as the reranker scores at
  query time (``tandem.rerank.rala``)::

      s(U, D) = w(U, D) * avg_i max_j <q_i, d_j^(L)>
      w(U, D) = <q_0, d_0^(L)> - min_{l in C} <q_0, d_0^(l)>

  q_i / d_j are last-layer token vectors (document punctuation scores 0, padding never matches),
  q_0 / d_0^(l) the per-layer sentence vectors (``cls="mean"``: mean over the text's tokens, as the
  reranker's default; ``"cls"``: the [CLS] position), C the premature layers. The model runs once per
  text with ``output_hidden_states``; the extra cost over ``cosine`` is the token-level similarity
  tensor (b x 2b x |U| x |D|), not a second forward pass.

Both return a (queries x documents) score matrix; the caller scales it by the learnable inverse
temperature. In eval mode, ``RaLaScore`` equals ``RaLaReranker.scores`` on the same model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tandem.errors import ConfigError
from tandem.index.layers import CLS_MODES, punctuation_ids
from tandem.rerank.rala import DEFAULT_CLS, DEFAULT_LAYERS


class TrainScore(Protocol):
    """Encodes texts with the model being trained and scores every query against every document."""

    name: str

    def encode(self, texts: Sequence[str], documents: bool) -> Any:
        """Differentiable features of ``texts`` (``documents``: the document side, e.g. punctuation masked)."""
        ...

    def matrix(self, queries: Any, documents: Any) -> Any:
        """(n_queries, n_documents) scores."""
        ...


class CosineScore:
    """cos(E(U), E(D)) with the model's own sentence embedding."""

    name = "cosine"

    def __init__(self, model: Any) -> None:
        self.model = model

    def encode(self, texts: Sequence[str], documents: bool) -> Any:
        import torch

        feats = self.model.preprocess(list(texts))
        return torch.nn.functional.normalize(self.model(feats)["sentence_embedding"], dim=-1)

    def matrix(self, queries: Any, documents: Any) -> Any:
        return queries @ documents.T


@dataclass
class TokenFeatures:
    """Per-text tensors for RaLa: unit last-layer tokens (n, T, dim), the per-layer unit sentence vectors
    (n, L+1, dim), which tokens are real (n, T) and which are punctuation (n, T)."""

    tokens: Any
    sentence: Any
    real: Any
    punct: Any


class RaLaScore:
    """RaLa's Eq. 4 (``omega=False``: avg MaxSim alone) on a sentence-transformers model's hidden states."""

    name = "rala"

    def __init__(self, model: Any, *, layers: Sequence[int] = DEFAULT_LAYERS, cls: str = DEFAULT_CLS,
                 omega: bool = True) -> None:
        import torch

        if cls not in CLS_MODES:
            raise ConfigError(f"unknown RaLa cls {cls!r}; choose one of {sorted(CLS_MODES)}")
        self.model, self.cls, self.omega = model, cls, omega
        self.hf = model[0].auto_model
        self.last = int(self.hf.config.num_hidden_layers)
        self.layers = [int(x) for x in layers]
        if not self.layers or any(not 0 <= x < self.last for x in self.layers):
            raise ConfigError(f"RaLa layers {list(layers)} must be hidden states before the last (0..{self.last - 1})")
        self._punct = torch.from_numpy(punctuation_ids(model.tokenizer))

    def encode(self, texts: Sequence[str], documents: bool) -> TokenFeatures:
        import torch
        import torch.nn.functional as F

        feats = self.model.preprocess(list(texts))
        inputs = {k: feats[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in feats}
        hidden = torch.stack(self.hf(**inputs, output_hidden_states=True).hidden_states, dim=1)  # (n, L+1, T, dim)
        real = feats["attention_mask"].bool()
        if self.cls == "mean":
            m = real[:, None, :, None].to(hidden.dtype)
            sentence = (hidden * m).sum(dim=2) / m.sum(dim=2).clamp(min=1)
        else:
            sentence = hidden[:, :, 0]
        punct = self._punct[feats["input_ids"]] & real if documents else torch.zeros_like(real)
        return TokenFeatures(F.normalize(hidden[:, -1], dim=-1), F.normalize(sentence, dim=-1), real, punct)

    def matrix(self, queries: TokenFeatures, documents: TokenFeatures) -> Any:
        import torch

        sims = torch.einsum("aid,bjd->abij", queries.tokens, documents.tokens)  # (nq, nd, Tq, Td)
        sims = sims.masked_fill(documents.punct[None, :, None, :], 0.0)
        sims = sims.masked_fill(~documents.real[None, :, None, :], float("-inf"))
        best = sims.max(dim=-1).values.masked_fill(~queries.real[:, None, :], 0.0)  # (nq, nd, Tq)
        late = best.sum(dim=-1) / queries.real.sum(dim=-1, keepdim=True).to(best.dtype)
        if not self.omega:
            return late
        gap = torch.einsum("ad,bld->abl", queries.sentence[:, self.last], documents.sentence)  # (nq, nd, L+1)
        return (gap[..., self.last] - gap[..., self.layers].min(dim=-1).values) * late


# name -> score class (``--score``); the first is the default, the paper's
SCORES: dict[str, type[CosineScore] | type[RaLaScore]] = {"rala": RaLaScore, "cosine": CosineScore}


def make_score(name: str, model: Any, **rala: Any) -> TrainScore:
    """The training score ``name`` over ``model``; ``rala`` options (layers, cls, omega) go to RaLa only."""
    if name not in SCORES:
        raise ConfigError(f"unknown training score {name!r}; choose one of {list(SCORES)}")
    return RaLaScore(model, **rala) if name == "rala" else CosineScore(model)
