"""R²AG's retrieval features and R²-Former (methods.md §2.2-2.3; paper §3.2-3.3, App. A).

For a list of k documents sorted by relevance (rank i = 1..k), with retriever embeddings x^q, x_i^d
and cos the cosine similarity:

    r_i = cos(x^q, x_i^d)                                         relevance (App. A, Eq. 1)
    γ_i = cos(x_i^d, Σ_{j<i} w_j x_j^d),  w = softmax(r)           precedent similarity (Eq. 2)
    γ_1 = 1                                                        authors' convention (nothing precedes)
    ζ_i = [cos(x_{i-1}^d, x_i^d) + cos(x_i^d, x_{i+1}^d)] / 2      neighbour similarity (Eq. 3);
          one-sided at the ends (ζ_1 = cos(d_1, d_2), ζ_k = cos(d_{k-1}, d_k)); ζ = 1 when k = 1

Features are stacked in the paper's order [r, γ, ζ] (the authors' code uses [r, ζ, γ]; the first
layer is linear, so the order only matters for loading their weights). An ablation zeroes a column.

R²-Former: ``Linear(3 -> d) + rank embedding`` -> 1-layer ``TransformerEncoder`` (4 heads, post-LN,
ReLU, dropout 0.1, no mask) -> H (k x d); the relevance head ``Linear(d -> 1)`` gives logits trained
with BCE against gold documents; the projection ``Linear(d -> h)`` maps H (not the logits) to the
LLM's hidden size. A checkpoint is a folder: ``r2former.json`` (config) + ``r2former.pt`` (weights),
plus ``trainer.pt`` (optimizer, step, log) for resuming and ``lora/`` when the LLM was LoRA-tuned.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from tandem.errors import ConfigError, DamagedError
from tandem.methods.r2ag.trainer import FEATURES, PROJECTIONS, check_drop
from tandem.outdir import atomic_dir, check_files, recover_swap
from tandem.train import state
from tandem.train.state import TRAINER_FILE

CONFIG_FILE, WEIGHTS_FILE, LORA_DIR = "r2former.json", "r2former.pt", "lora"
FORMAT_VERSION = 1


# -- features (pure functions) -----------------------------------------------------------------

def _unit(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norm == 0, 1.0, norm)


def relevance(query: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """r_i = cos(x^q, x_i^d) for a query vector (dim,) and document vectors (k, dim)."""
    return (_unit(docs) @ _unit(query)).astype(np.float32)


def precedent_similarity(docs: np.ndarray, r: np.ndarray, first: float = 1.0) -> np.ndarray:
    """γ_i = cos(x_i^d, Σ_{j<i} softmax(r)_j x_j^d); γ_1 = ``first`` (the authors' 1).

    The softmax may be normalised over all k (paper) or over j < i (code): a cosine ignores the scale.
    """
    d = _unit(docs)
    w = np.exp(r - r.max())
    w = w / w.sum()
    out = np.empty(len(d), dtype=np.float32)
    if len(d):
        out[0] = first
    prefix = np.zeros(d.shape[1], dtype=np.float64)
    for i in range(1, len(d)):
        prefix = prefix + w[i - 1] * d[i - 1]
        out[i] = float(_unit(prefix) @ d[i])
    return out


def neighbor_similarity(docs: np.ndarray) -> np.ndarray:
    """ζ_i: mean cosine with the adjacent documents (one neighbour at the ends; 1.0 for a lone document)."""
    d = _unit(docs)
    k = len(d)
    if k <= 1:
        return np.ones(k, dtype=np.float32)
    adj = np.sum(d[:-1] * d[1:], axis=1)  # adj[i] = cos(d_i, d_{i+1})
    out = np.empty(k, dtype=np.float32)
    out[0], out[-1] = adj[0], adj[-1]
    out[1:-1] = (adj[:-1] + adj[1:]) / 2
    return out


def sort_by_relevance(query: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """Permutation that sorts the documents by r, descending (stable: ties keep retrieval order)."""
    return np.argsort(-relevance(query, docs), kind="stable")


def list_features(query: np.ndarray, docs: np.ndarray, *, drop: Sequence[str] = (), gamma_first: float = 1.0) -> np.ndarray:
    """The (k, 3) feature matrix [r, γ, ζ] of a relevance-sorted list; columns named in ``drop`` are zero."""
    unknown = sorted(set(drop) - set(FEATURES))
    if unknown:
        raise ConfigError(f"unknown features to drop {unknown}; features: {list(FEATURES)}")
    r = relevance(query, docs)
    if len(r) > 1 and np.any(np.diff(r) > 1e-6):
        raise ConfigError("documents must be sorted by relevance (descending r) before computing features")
    feats = np.stack([r, precedent_similarity(docs, r, gamma_first), neighbor_similarity(docs)], axis=1)
    for name in drop:
        feats[:, FEATURES.index(name)] = 0.0
    return feats.astype(np.float32)


# -- the model ---------------------------------------------------------------------------------

@dataclass
class R2FormerConfig:
    """Architecture plus the settings a checkpoint must carry to be used the way it was trained."""

    llm_hidden: int
    d_model: int = 256
    heads: int = 4
    layers: int = 1
    ff: int = 2048
    dropout: float = 0.1
    max_k: int = 64
    drop_features: list[str] = field(default_factory=list)
    gamma_first: float = 1.0
    embed_std: float = 0.02  # std of the LLM's token embeddings: the projection starts at that scale
    projection: str = "linear"  # "linear": v = W h + b (authors); "scaled": v = s (W h + b), s = embed_std / sqrt(d)
    encoder: str = "minilm"
    llm: str = ""
    placeholder: str = ""
    template: str = "chat"
    doc_words: int | None = None
    version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ConfigError(f"d_model {self.d_model} must be divisible by heads {self.heads}")
        if self.projection not in PROJECTIONS:
            raise ConfigError(f"projection must be one of {list(PROJECTIONS)}, got {self.projection!r}")
        check_drop(self.drop_features)


class R2Former(nn.Module):
    """Feature list (B, k, 3) -> (projected vectors (B, k, llm_hidden), relevance logits (B, k))."""

    def __init__(self, config: R2FormerConfig) -> None:
        super().__init__()
        self.config = config
        self.inp = nn.Linear(len(FEATURES), config.d_model)
        self.rank = nn.Embedding(config.max_k, config.d_model)
        layer = nn.TransformerEncoderLayer(config.d_model, config.heads, config.ff, config.dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, config.layers, enable_nested_tensor=False)
        self.head = nn.Linear(config.d_model, 1)
        self.proj = nn.Linear(config.d_model, config.llm_hidden)
        # H is layer-normed (unit scale per dim): weights of std embed_std/sqrt(d) give outputs at the
        # embeddings' scale (an all-zero start gives NaN gradients through the LLM, docs/design.md).
        # "scaled" keeps that factor outside the weights, so one Adam step of size lr moves a vector by
        # about lr * embed_std instead of lr * d: the same functions, steps at the embeddings' scale.
        step = config.embed_std / config.d_model ** 0.5
        self.scale = step if config.projection == "scaled" else 1.0
        nn.init.normal_(self.proj.weight, std=0.1 if config.projection == "scaled" else step)
        nn.init.zeros_(self.proj.bias)

    def start_at(self, vector: torch.Tensor) -> None:
        """Centre the projection's output on ``vector`` (e.g. the placeholder token's own embedding),
        so training starts from the prompt without retrieval information plus a small perturbation."""
        with torch.no_grad():
            self.proj.bias.copy_(vector.detach().to(self.proj.bias.dtype) / self.scale)

    def forward(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if feats.dim() != 3 or feats.shape[-1] != len(FEATURES):
            raise ConfigError(f"features must have shape (batch, k, {len(FEATURES)}), got {tuple(feats.shape)}")
        k = feats.shape[1]
        if k > self.config.max_k:
            raise ConfigError(f"k = {k} documents exceeds the R²-Former's max_k = {self.config.max_k}")
        h = self.encoder(self.inp(feats) + self.rank(torch.arange(k, device=feats.device)))
        return self.proj(h) * self.scale, self.head(h).squeeze(-1)


def relevance_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """L_relevance: BCE with logits against gold labels, mean over documents and batch (authors' QDM loss)."""
    return nn.functional.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))


# -- checkpoints -------------------------------------------------------------------------------

def save_checkpoint(folder: str | Path, model: R2Former, trainer: dict[str, Any] | None = None,
                    lora_save: Callable[[Path], None] | None = None) -> Path:
    """Write a checkpoint folder atomically (temporary folder renamed into place)."""
    with atomic_dir(folder, "r2former") as tmp:
        (tmp / CONFIG_FILE).write_text(json.dumps(asdict(model.config), indent=1), encoding="utf-8")
        torch.save(model.state_dict(), tmp / WEIGHTS_FILE)
        if trainer is not None:
            torch.save(trainer, tmp / TRAINER_FILE)
        if lora_save is not None:
            lora_save(tmp / LORA_DIR)
    return Path(folder)


def load_r2former(folder: str | Path) -> R2Former:
    """An R²-Former from a checkpoint folder, in eval mode; a clear error for anything else."""
    path = Path(folder)
    recover_swap(path)  # a save cut between its two renames is rolled back
    check_files(path, lambda _file: f"train it again: tandem train r2ag --out {path} --no-resume")
    if not (path / CONFIG_FILE).is_file() or not (path / WEIGHTS_FILE).is_file():
        raise ConfigError(f"{path} is not an R²-Former checkpoint (needs {CONFIG_FILE} and {WEIGHTS_FILE}); "
                          "train one with `tandem train r2ag`")
    raw = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
    if raw.get("version") != FORMAT_VERSION:
        raise ConfigError(f"{path}: checkpoint format {raw.get('version')} is not {FORMAT_VERSION}")
    known = set(R2FormerConfig.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{path}/{CONFIG_FILE}: unknown keys {unknown}")
    model = R2Former(R2FormerConfig(**raw))
    try:
        model.load_state_dict(torch.load(path / WEIGHTS_FILE, map_location="cpu", weights_only=True))
    except (RuntimeError, EOFError, OSError) as exc:  # torch's "failed finding central directory", short reads
        raise DamagedError(f"cannot read {path / WEIGHTS_FILE} ({str(exc).splitlines()[0][:200]}): the file is "
                           f"damaged; train it again: tandem train r2ag --out {path} --no-resume") from exc
    return model.eval()


def load_trainer_state(folder: str | Path) -> dict[str, Any] | None:
    """The optimizer/step state saved next to a checkpoint (None when there is none), read safely
    (:func:`tandem.train.state.load_trainer_state`); the errors say how to start ``tandem train r2ag`` over."""
    fix = f"delete {Path(folder)} to start over (train r2ag: or use --no-resume)"
    return state.load_trainer_state(folder, fix=fix, refused="delete it or use --no-resume")


__all__ = ["CONFIG_FILE", "FEATURES", "FORMAT_VERSION", "LORA_DIR", "PROJECTIONS", "TRAINER_FILE", "WEIGHTS_FILE",
           "R2Former", "R2FormerConfig", "check_drop", "list_features", "load_r2former", "load_trainer_state",
           "neighbor_similarity", "precedent_similarity", "relevance", "relevance_loss", "save_checkpoint",
           "sort_by_relevance"]
