"""R²AG's trainer, ``tandem train r2ag``: its settings (the hyper-parameters, and the data, LLM and encoder it
trains with) and its entry in :data:`tandem.registry.TRAINERS`, imported with the package. The command line's
options are generated from :class:`R2AGTrainRun`; the training code (:mod:`.train`, :mod:`.former`: torch) loads
when the trainer runs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Self

from pydantic import Field, model_validator

from tandem.errors import ConfigError
from tandem.methods.r2ag.prompts import TEMPLATES
from tandem.registry import TRAINERS
from tandem.settings import Settings
from tandem.train.specs import runs

FEATURES = ("r", "gamma", "zeta")  # R²-Former's list-wise features, in the paper's order
PROJECTIONS = ("linear", "scaled")
LM_LOSSES = ("answer", "sequence")


def check_drop(drop: Sequence[str]) -> None:
    """A ConfigError naming any feature to drop that is not one of r / gamma / zeta."""
    unknown = sorted(set(drop) - set(FEATURES))
    if unknown:
        raise ConfigError(f"unknown features to drop {unknown}; features: {list(FEATURES)}")


class R2AGTrainSettings(Settings):
    """R²AG's training hyper-parameters (authors' values in methods.md §2.5; CPU-sized defaults where noted)."""

    k: int = Field(10, ge=1, description="documents per list", json_schema_extra={"cli": ["--k", "-k"]})
    epochs: int = Field(2, ge=1, description="passes over the training questions")
    lr: float = Field(2e-4, gt=0, description="AdamW learning rate (constant after the warm-up)")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    warmup: float = Field(0.03, ge=0, le=1, description="linear warm-up, a fraction of the steps")
    clip: float = Field(0.3, gt=0, description="gradient norm clip")
    grad_accum: int = Field(4, ge=1, description="examples per optimizer step (authors: batch 2 x accumulation 2)")
    relevance_weight: float = Field(1.0, ge=0, description="w in L = L_LM + w L_relevance (0 = without L_relevance)")
    lm_loss: str = Field("answer", description="answer (answer tokens only) | sequence (whole prompt, authors' code)")
    drop_features: list[str] = Field([], description="ablation: zero these features (r, gamma, zeta) at training and "
                                                     "inference", json_schema_extra={"cli": ["--drop"]})
    gamma_first: float = Field(1.0, description="γ of the first document, which nothing precedes (authors: 1)")
    template: str = Field("chat", description="chat (the tokenizer's template) | alpaca (the authors' wrapper)")
    doc_words: int | None = Field(None, ge=1, description="cut each document to N words (CPU budget); null: whole")
    placeholder: str | None = Field(None, description="placeholder token (null: chosen for the tokenizer)")
    d_model: int = Field(256, ge=1, description="R²-Former's width (a multiple of its 4 heads)")
    projection: str = Field("scaled", description="scaled: steps at the embeddings' scale, starting at the "
                                                  "placeholder | linear: the authors' layer")
    max_minutes: float = Field(30.0, ge=0, description="stop after this long (the checkpoint is saved)")
    max_steps: int | None = Field(None, ge=1, description="stop after this many optimizer steps (null: all epochs)")
    eval_every: int = Field(25, ge=1, description="validation loss every N optimizer steps")
    save_every: int = Field(25, ge=1, description="checkpoint every N optimizer steps")
    seed: int = Field(42, description="random seed (initialisation, data order)")
    lora_r: int = Field(0, ge=0, description="> 0: LoRA rank on q_proj/v_proj, the LLM is then tuned too "
                                             "(authors: r 16, alpha 32, dropout 0.1)")
    lora_alpha: int = Field(32, ge=1, description="LoRA scale numerator (scale = alpha / r)")
    lora_dropout: float = Field(0.1, ge=0, lt=1, description="dropout on the LoRA input")

    @model_validator(mode="after")
    def _choices(self) -> Self:
        if self.lm_loss not in LM_LOSSES:
            raise ConfigError(f"lm_loss must be one of {list(LM_LOSSES)}, got {self.lm_loss!r}")
        if self.template not in TEMPLATES:
            raise ConfigError(f"template must be one of {list(TEMPLATES)}, got {self.template!r}")
        if self.projection not in PROJECTIONS:
            raise ConfigError(f"projection must be one of {list(PROJECTIONS)}, got {self.projection!r}")
        check_drop(self.drop_features)
        return self


class R2AGTrainRun(R2AGTrainSettings):
    """``tandem train r2ag``: the data, LLM and encoder it trains with, and the hyper-parameters."""

    dataset: Path = Field(description="QA dataset with gold answers (and gold/context passages)")
    train_questions: str = Field("250:500", pattern=r"^\d*:\d*$", description="questions to train on, START:END")
    val_questions: str = Field("200:250", pattern=r"^(\d*:\d*)?$", description="held-apart questions for the "
                                                                               "validation loss, START:END ('' = none)")
    index: Path | None = Field(None, description="index over the pool: lists shorter than k are topped up with "
                                                 "retrieved distractors")
    llm: str = Field("local", description="in-process LLM spec: local | hf:PATH (it stays frozen unless lora_r)")
    llm_options: list[str] = Field([], description="backend option KEY=VALUE (num_threads, dtype, ...)",
                                   json_schema_extra={"cli": ["--llm-opt"]})
    encoder: str = Field("minilm", description="retriever encoder for the features (embedded name or path)")
    resume: bool = Field(True, description="continue from a checkpoint in the output folder")

    def hyper(self) -> R2AGTrainSettings:
        """The hyper-parameters alone."""
        return R2AGTrainSettings.from_dict({k: v for k, v in self.to_dict().items()
                                            if k in R2AGTrainSettings.model_fields})


TRAINERS.register("r2ag", settings=R2AGTrainRun, folder="r2former",
                  out="Checkpoint folder (resumed if it holds a run with the same settings).",
                  doc="R²AG: train R²-Former + projection (L = L_LM + L_relevance) through a frozen LLM; prints "
                      "validation JSON")(runs("tandem.methods.r2ag.training:run_training"))


__all__ = ["FEATURES", "LM_LOSSES", "PROJECTIONS", "R2AGTrainRun", "R2AGTrainSettings", "check_drop"]
