"""The CoRAG model: a trainable query encoder over a frozen passage index, and a reader.

- Retriever: a sentence-transformers copy of the base encoder (MiniLM by default) encodes queries;
  passages keep the vectors the bench indexed with the base encoder (query-side fine-tuning, as in
  the paper: the index is never re-encoded). Score s(q, d) = cos(E_q(q), E_d(d)) / temperature.
- Reader (``READERS``): ``decoder`` = the embedded SmolLM2 (hf backend) reading the top-k passages
  concatenated in one chat prompt, with LoRA adapters (peft) on the last ``lora_layers`` layers.
  This departs from Atlas/CoRAG's T5 Fusion-in-Decoder; a FiD reader plugs in as another entry with
  the same methods (``answer_logliks``, ``nll``, ``generate``, ``trainable``).
- Federated parameters: only the trainable tensors (query encoder + LoRA), by name, as numpy.

Losses (Atlas, methods.md §4.3):

    p_LM(z_j)  = softmax_j( log p(a | z_j, q) / tau_LM )          (detached; mean token log-prob)
    p_R(z_j)   = softmax_j( s(q, z_j) )
    L_PD       = KL(p_LM || p_R)                                 retriever (perplexity distillation)
    L_reader   = -(1/|a|) log p(a | z_1..z_k, q)                 reader NLL given the top-k
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field

from tandem.errors import ConfigError, DataError, IndexMismatchError
from tandem.methods.answers import clean_answer as first_answer_line
from tandem.model_files import canonical_name
from tandem.settings import Settings
from tandem.types import Document

SYSTEM = ("Answer the question with the answer only: a name, date, number or short phrase of a few words, "
          "never a sentence. Use the passages when they help.")


class ModelConfig(Settings):
    """Model settings shared by every client (they must agree for FedAvg to make sense)."""

    encoder: str = Field("minilm", description="the retriever's query/passage encoder")
    reader: str = Field("decoder", description="the reader kind")
    reader_model: str = Field("smollm2", description="the reader LLM (embedded name or folder)")
    top_k: int = Field(3, ge=1, description="passages retrieved per question", json_schema_extra={"cli": ["--k", "-k"]})
    passage_tokens: int = Field(48, ge=1, description="reader tokens kept per passage")
    max_answer_tokens: int = Field(10, ge=1, description="max answer tokens (training target and generation)",
                                   json_schema_extra={"cli": ["--answer-tokens"]})
    retriever_temperature: float = Field(0.1, gt=0, description="temperature of the retrieval distribution")
    lm_temperature: float = Field(1.0, gt=0, description="temperature of the reader's target distribution")
    lora_r: int = Field(8, ge=1, description="LoRA rank")
    lora_alpha: int = Field(16, ge=1, description="LoRA alpha")
    lora_layers: int = Field(8, ge=1, description="LoRA on the last N reader layers")
    lora_targets: tuple[str, ...] = Field(("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
                                          description="the reader's modules LoRA adapts")
    train_retriever: bool = Field(True, description="train the retriever")
    train_reader: bool = Field(True, description="train the reader")
    extra: dict[str, Any] = Field(default_factory=dict, description="reader-specific options")


def perplexity_distillation_loss(retriever_scores: torch.Tensor, reader_logliks: torch.Tensor,
                                 lm_temperature: float = 1.0) -> torch.Tensor:
    """KL(p_LM || p_R) averaged over the batch; both inputs are (batch, k).

    ``reader_logliks`` is detached: only the retriever learns from this term (Atlas PDist).
    """
    if retriever_scores.shape != reader_logliks.shape or retriever_scores.dim() != 2:
        raise ConfigError(f"scores {tuple(retriever_scores.shape)} and logliks {tuple(reader_logliks.shape)} must both be (batch, k)")
    target = F.softmax(reader_logliks.detach() / lm_temperature, dim=-1)
    log_p = F.log_softmax(retriever_scores, dim=-1)
    return (torch.xlogy(target, target) - target * log_p).sum(-1).mean()


class PassageStore:
    """A bench store opened for retrieval: its documents, frozen vectors and FAISS index."""

    def __init__(self, folder: str | Path) -> None:
        from tandem.index import open_index

        self.index = open_index(folder)
        self.docs: list[Document] = self.index.store.docs
        faiss_index = self.index.faiss
        self.vectors = np.asarray(faiss_index.reconstruct_n(0, faiss_index.ntotal), dtype=np.float32)
        self.encoder_name = self.index.manifest.encoder

    def search(self, queries: np.ndarray, k: int) -> np.ndarray:
        """Row indices (n, k) of the top-k passages by inner product."""
        _, ids = self.index.faiss.search(np.ascontiguousarray(queries, dtype=np.float32), min(k, len(self.docs)))
        return ids


class QueryEncoder(torch.nn.Module):
    """The trainable query side of the retriever (a sentence-transformers model)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        from sentence_transformers import SentenceTransformer

        from tandem.model_files import offline_env, resolve_model

        offline_env()
        self.st = SentenceTransformer(resolve_model(name), device="cpu")
        self.st.max_seq_length = 64

    def forward(self, texts: Sequence[str]) -> torch.Tensor:
        feats = self.st.preprocess(list(texts))
        return F.normalize(self.st(feats)["sentence_embedding"], dim=-1)


class Reader(Protocol):
    """What training and evaluation need from a reader."""

    def answer_logliks(self, question: str, passages: Sequence[Document], answer: str) -> torch.Tensor: ...
    def nll(self, question: str, passages: Sequence[Document], answer: str) -> torch.Tensor: ...
    def generate(self, questions: Sequence[str], passages: Sequence[Sequence[Document]]) -> list[str]: ...
    def trainable(self) -> dict[str, torch.nn.Parameter]: ...


class DecoderReader:
    """SmolLM2 (or any local causal LM) reading concatenated passages; LoRA on its last layers."""

    def __init__(self, config: ModelConfig) -> None:
        from peft import LoraConfig, get_peft_model

        from tandem.llm.local import load_local

        self.config = config
        llm = (load_local(config.reader_model, engine="torch") if not Path(config.reader_model).is_dir()
               else _load_hf(config.reader_model))
        self.tokenizer = llm.tokenizer
        self.end_ids = llm.eos_token_ids
        self.pad_id = llm.pad_token_id
        n_layers = int(llm.model.config.num_hidden_layers)
        layers = list(range(max(0, n_layers - config.lora_layers), n_layers))
        lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=0.0,
                          target_modules=list(config.lora_targets), layers_to_transform=layers, task_type="CAUSAL_LM")
        self.model = get_peft_model(llm.model, lora)
        self.model.eval()
        self._end = self.tokenizer.decode([self.end_ids[0]])

    def trainable(self) -> dict[str, torch.nn.Parameter]:
        return {n: p for n, p in self.model.named_parameters() if p.requires_grad}

    def _truncate(self, doc: Document) -> str:
        ids = self.tokenizer(doc.text, add_special_tokens=False)["input_ids"][: self.config.passage_tokens]
        return f"{doc.title}: {self.tokenizer.decode(ids)}" if doc.title else self.tokenizer.decode(ids)

    def prompt(self, question: str, passages: Sequence[Document]) -> str:
        """The chat prompt (up to the assistant turn) for ``question`` over ``passages``."""
        ctx = "\n".join(f"Passage {i + 1}: {self._truncate(d)}" for i, d in enumerate(passages))
        user = f"{ctx}\n\nQuestion: {question}" if passages else f"Question: {question}"
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
        return str(self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False))

    def _pairs(self, prompts: Sequence[str], answer: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """Left-padded prompt+answer ids, mask, positions; answer = its tokens + end-of-turn."""
        ans = self.tokenizer(answer.strip(), add_special_tokens=False)["input_ids"][: self.config.max_answer_tokens]
        ans = ans + [self.end_ids[0]]
        seqs = [self.tokenizer(p, add_special_tokens=False)["input_ids"] + ans for p in prompts]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, width - len(s):] = torch.tensor(s)
            mask[i, width - len(s):] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        return ids, mask, pos, len(ans)

    def _answer_logprob(self, prompts: Sequence[str], answer: str) -> torch.Tensor:
        """Mean log-probability of the answer tokens after each prompt, shape (len(prompts),)."""
        ids, mask, pos, n = self._pairs(prompts, answer)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=n + 1)
        logits = out.logits[:, :-1, :].float()  # positions predicting the n answer tokens
        target = ids[:, -n:]
        return torch.gather(F.log_softmax(logits, -1), 2, target.unsqueeze(-1)).squeeze(-1).mean(-1)

    def answer_logliks(self, question: str, passages: Sequence[Document], answer: str) -> torch.Tensor:
        """log p(a | z_j, q) per passage (no gradient), shape (k,)."""
        with torch.no_grad():
            return self._answer_logprob([self.prompt(question, [d]) for d in passages], answer)

    def nll(self, question: str, passages: Sequence[Document], answer: str) -> torch.Tensor:
        """Mean token NLL of the answer given all passages (with gradient)."""
        return -self._answer_logprob([self.prompt(question, passages)], answer)[0]

    def generate(self, questions: Sequence[str], passages: Sequence[Sequence[Document]]) -> list[str]:
        """Greedy answers, one batch (left padding)."""
        prompts = [self.prompt(q, p) for q, p in zip(questions, passages, strict=True)]
        enc = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        width = max(len(e) for e in enc)
        ids = torch.full((len(enc), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, e in enumerate(enc):
            ids[i, width - len(e):] = torch.tensor(e)
            mask[i, width - len(e):] = 1
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=self.config.max_answer_tokens,
                                      do_sample=False, eos_token_id=self.end_ids, pad_token_id=self.pad_id)
        texts = []
        for row in out[:, width:].tolist():
            cut = next((j for j, t in enumerate(row) if t in self.end_ids), len(row))
            texts.append(clean_answer(self.tokenizer.decode(row[:cut], skip_special_tokens=True)))
        return texts


_LEAD = re.compile(r"^\s*(the\s+)?(short\s+|final\s+)?answer\b(\s+to\s+(the|this)\s+question)?(\s+is\b)?\s*[:\-]?\s*",
                   re.IGNORECASE)


def clean_answer(text: str) -> str:
    """The reader's answer in a generation: :func:`tandem.methods.answers.clean_answer` with a leading "The
    (short / final) answer (to the question) is" label, colon or not."""
    return first_answer_line(text, _LEAD)


def _load_hf(path: str) -> Any:
    from tandem.llm.hf import HFLLM

    return HFLLM(path)


READERS: dict[str, type] = {"decoder": DecoderReader}


class CoRAGModel:
    """Query encoder + reader, with their trainable tensors exchanged as named numpy arrays."""

    def __init__(self, config: ModelConfig, reader: Any | None = None, retriever: QueryEncoder | None = None) -> None:
        if config.reader not in READERS:
            raise ConfigError(f"unknown reader {config.reader!r}; readers: {sorted(READERS)}")
        self.config = config
        self.retriever = retriever if retriever is not None else QueryEncoder(config.encoder)
        self.reader = reader if reader is not None else READERS[config.reader](config)
        for p in self.retriever.parameters():
            p.requires_grad_(config.train_retriever)

    def trainable(self) -> dict[str, torch.nn.Parameter]:
        """Named trainable tensors: ``retriever.*`` then ``reader.*``."""
        out = {f"retriever.{n}": p for n, p in self.retriever.named_parameters() if p.requires_grad}
        if self.config.train_reader:
            out.update({f"reader.{n}": p for n, p in self.reader.trainable().items()})
        return out

    def get_arrays(self) -> dict[str, np.ndarray]:
        """The trainable tensors as numpy copies (what FedAvg averages)."""
        return {n: p.detach().cpu().numpy().copy() for n, p in self.trainable().items()}

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Load named arrays into the trainable tensors; names and shapes must match exactly."""
        own = self.trainable()
        if set(arrays) != set(own):
            missing, extra = sorted(set(own) - set(arrays))[:3], sorted(set(arrays) - set(own))[:3]
            raise DataError(f"parameter names differ from the model's: missing {missing}, unexpected {extra}")
        with torch.no_grad():
            for n, p in own.items():
                if tuple(arrays[n].shape) != tuple(p.shape):
                    raise DataError(f"parameter {n}: shape {arrays[n].shape} != model's {tuple(p.shape)}")
                p.copy_(torch.from_numpy(np.asarray(arrays[n], dtype=np.float32)))

    def retrieve(self, store: PassageStore, questions: Sequence[str], k: int | None = None,
                 grad: bool = False) -> tuple[torch.Tensor, np.ndarray]:
        """Scores (n, k) with gradient to the query encoder if ``grad``, and the row ids (n, k)."""
        k = k or self.config.top_k
        if store.encoder_name and canonical_name(store.encoder_name) != canonical_name(self.config.encoder):
            raise IndexMismatchError(f"store indexed with {store.encoder_name!r}, query encoder is {self.config.encoder!r}")
        with torch.set_grad_enabled(grad):
            q = self.retriever(questions)
        rows = store.search(q.detach().numpy(), k)
        docs = torch.from_numpy(store.vectors[rows])  # (n, k, dim), frozen
        scores = torch.einsum("nd,nkd->nk", q, docs) / self.config.retriever_temperature
        return scores, rows
