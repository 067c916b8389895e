"""R²AG: retrieval information injected into the LLM's input (Ye et al., Findings of EMNLP 2024;
methods.md §2). Per question::

    D      = retrieve k documents (or the question's own context paragraphs, docs="context")
    D      = sort D by r = cos(x^q, x^d)                       the retriever's embeddings (MiniLM here)
    F      = [r, γ, ζ] per document                             list-wise features (former.py)
    H, s   = R²-Former(F)                                       s: relevance head (trace only)
    v_i    = proj(H_i)                                          one vector per document, LLM hidden size
    E      = embed(prompt with a placeholder before each document); E[slot_i] = v_i
    answer = greedy decoding from E

The LLM must take input embeddings: the ``local``/``hf`` backends in-process, or an ``openai`` backend
talking to a vLLM server started with ``--enable-prompt-embeds`` together with ``embeddings_from``
(the same model's folder, for the tokenizer and token embedding table: see docs/methods/r2ag.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tandem.errors import ConfigError
from tandem.index.encoder import Encoder
from tandem.index.store import DocStore
from tandem.llm.base import LLM, LLMRequest, Message
from tandem.methods.base import Search, record_call
from tandem.methods.parts import Parts
from tandem.methods.r2ag.former import (
    R2Former,
    list_features,
    sort_by_relevance,
)
from tandem.methods.r2ag.prompts import build_prompt, choose_placeholder, parse_answer
from tandem.methods.r2ag.settings import R2AGSettings
from tandem.registry import METHODS
from tandem.types import Answer, Document, Hit, Question, Step, Trace


def rank_and_featurize(encoder: Encoder, question: str, docs: Sequence[Document], *, drop: Sequence[str] = (),
                       gamma_first: float = 1.0) -> tuple[list[Document], np.ndarray, np.ndarray]:
    """Documents sorted by r (descending), their (k, 3) features and the permutation applied."""
    vecs = encoder.encode([question, *[d.contents for d in docs]])
    order = sort_by_relevance(vecs[0], vecs[1:])
    return [docs[i] for i in order], list_features(vecs[0], vecs[1:][order], drop=drop, gamma_first=gamma_first), order


def inject(embeds: torch.Tensor, positions: Sequence[int], vectors: torch.Tensor) -> torch.Tensor:
    """A copy of ``embeds`` (n, hidden) with row ``positions[i]`` replaced by ``vectors[i]`` (Eq. 5).
    Differentiable in ``vectors``: training backpropagates through it."""
    if len(positions) != vectors.shape[0]:
        raise ConfigError(f"{len(positions)} placeholders for {vectors.shape[0]} vectors")
    out = embeds.clone()
    out[list(positions)] = vectors.to(out.dtype)
    return out


def embedding_backend(llm: LLM, embeddings_from: str | None = None) -> Any:
    """The object R²AG generates through: ``llm`` itself when it takes input embeddings (hf/local),
    a prompt-embeds client for an openai backend given ``embeddings_from``; else a ConfigError."""
    inner = getattr(llm, "inner", llm)  # CachedLLM: generation from embeddings is not cached
    if all(hasattr(inner, a) for a in ("tokenizer", "embed_ids", "generate_from_embeds")):
        return inner
    from tandem.llm.openai_compat import OpenAILLM

    if isinstance(inner, OpenAILLM):
        if not embeddings_from:
            raise ConfigError(
                f"r2ag injects vectors into the LLM's input embeddings; {inner.spec} is an OpenAI-compatible server, "
                "which takes them only as vLLM prompt embeddings: start vLLM with --enable-prompt-embeds and "
                "--set embeddings_from=HF_FOLDER (the same model's tokenizer and weights), or use the local/hf backend")
        from tandem.llm.prompt_embeds import PromptEmbedsLLM

        return PromptEmbedsLLM(inner, embeddings_from)
    raise ConfigError(f"r2ag injects vectors into the LLM's input embeddings, which the {getattr(llm, 'spec', llm)!r} "
                      "backend cannot take: use --llm local or hf:PATH (in-process transformers), or an openai backend "
                      "to a vLLM server with --enable-prompt-embeds plus --set embeddings_from=HF_FOLDER")


class R2AG:
    """Retrieve, featurize, R²-Former, inject at the placeholders, greedy answer."""

    name = "r2ag"

    def __init__(self, llm: Any, r2former: R2Former, encoder: Encoder, settings: R2AGSettings | None = None, *,
                 search: Search | None = None, store: DocStore | None = None) -> None:
        s = settings or R2AGSettings()
        if s.docs == "retrieve" and search is None:
            raise ConfigError("r2ag with docs=retrieve needs an index (--index DIR)")
        if s.docs == "context" and store is None:
            raise ConfigError("r2ag with docs=context needs the dataset's passages")
        hidden = int(llm.input_embeddings().weight.shape[1])
        if hidden != r2former.config.llm_hidden:
            raise ConfigError(f"the R²-Former projects to {r2former.config.llm_hidden} dims but the LLM's "
                              f"embeddings have {hidden}: train it for this LLM")
        cfg = r2former.config
        self.llm, self.model, self.encoder, self.search, self.store = llm, r2former.eval(), encoder, search, store
        self.k, self.docs, self.max_tokens, self.inject = s.k, s.docs, s.max_tokens, s.inject
        self.template = s.template or cfg.template
        self.doc_words = (s.doc_words or None) if s.doc_words is not None else cfg.doc_words  # 0: whole
        self.placeholder = choose_placeholder(llm.tokenizer, llm.eos_token_ids, s.placeholder or cfg.placeholder or None)

    def candidates(self, question: Question) -> tuple[list[Hit], list[Document]]:
        """The k documents: retrieved with the question, or the question's own context paragraphs."""
        if self.docs == "retrieve":
            assert self.search is not None
            return self.search(question.text, self.k)
        assert self.store is not None
        ids = [d for d in question.metadata.get("context_ids", []) if d in self.store][: self.k]
        if not ids:
            raise ConfigError(f"question {question.id} has no context paragraphs in the store (docs=context)")
        return [Hit(d, 0.0, i + 1, "context") for i, d in enumerate(ids)], [self.store.get(d) for d in ids]

    def answer(self, question: Question) -> Answer:
        trace = Trace()
        hits, docs = self.candidates(question)
        trace.add(Step("retrieve", queries=[question.text], hits=hits))
        ranked, feats, _ = rank_and_featurize(self.encoder, question.text, docs, drop=self.model.config.drop_features,
                                              gamma_first=self.model.config.gamma_first)
        with torch.no_grad():
            vectors, logits = self.model(torch.from_numpy(feats)[None])
        scores = torch.sigmoid(logits[0]).tolist()
        trace.add(Step("features", hits=[Hit(d.id, float(f[0]), i + 1, "r2ag") for i, (d, f) in enumerate(zip(ranked, feats, strict=True))],
                       notes={"features": [{"doc_id": d.id, "r": round(float(f[0]), 4), "gamma": round(float(f[1]), 4),
                                            "zeta": round(float(f[2]), 4), "relevance": round(s, 4)}
                                           for d, f, s in zip(ranked, feats, scores, strict=True)],
                              "dropped": list(self.model.config.drop_features)}))
        trace.read([d.id for d in ranked])
        prompt = build_prompt(self.llm.tokenizer, question.text, ranked, self.placeholder, template=self.template,
                              doc_words=self.doc_words)
        with torch.no_grad():
            embeds = self.llm.embed_ids(torch.tensor([prompt.ids]))[0]
            if self.inject:
                embeds = inject(embeds, prompt.positions, vectors[0])
        step = trace.add(Step("answer", notes={"placeholder": self.placeholder[0], "positions": prompt.positions,
                                               "injected": self.inject}))
        req = LLMRequest((Message("user", prompt.text),), max_tokens=self.max_tokens, temperature=0.0)
        resp = record_call(self.llm, step, "answer", req, send=lambda r: self.llm.generate_from_embeds(
            embeds[None], max_tokens=r.max_tokens, temperature=r.temperature))
        return Answer(question.id, parse_answer(resp.text), trace, self.name)


def apply_lora(llm: Any, folder: Path) -> None:
    """Merge a checkpoint's LoRA adapter into an in-process model (changes ``llm.model`` for all its users)."""
    if not hasattr(llm, "model"):
        raise ConfigError(f"{folder} holds a LoRA adapter: serve the merged model instead (a remote LLM cannot load it here)")
    from peft import PeftModel

    llm.model = PeftModel.from_pretrained(llm.model, str(folder)).merge_and_unload().eval()


@METHODS.register("r2ag", settings=R2AGSettings, needs=("index",))
def build(parts: Parts, s: R2AGSettings) -> R2AG:
    """R²AG from a checkpoint folder (``r2former``): its R²-Former, its LoRA adapter if any, its encoder."""
    from tandem.index.encoder import load_encoder
    from tandem.methods.r2ag.former import LORA_DIR, load_r2former

    if not s.r2former:
        raise ConfigError("r2ag needs a trained R²-Former: --r2former PATH (make one with `tandem train r2ag`)")
    model = load_r2former(s.r2former)
    backend = embedding_backend(parts.llm, s.embeddings_from)
    if (Path(s.r2former) / LORA_DIR).is_dir():
        apply_lora(backend, Path(s.r2former) / LORA_DIR)
    return R2AG(backend, model, load_encoder(s.encoder or model.config.encoder), s, search=parts.search,
                store=parts.store)
