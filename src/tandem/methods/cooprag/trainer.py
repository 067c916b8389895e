"""CoopRAG's trainer, ``tandem train retriever``: its settings (hyper-parameters and the data it trains and
evaluates on) and its entry in :data:`tandem.registry.TRAINERS`, imported with the package. The command line's
options are generated from :class:`RetrieverTrainRun`; the training code (:mod:`.train_retriever`, torch) loads when
the trainer runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from tandem.registry import TRAINERS
from tandem.settings import Settings
from tandem.train.specs import runs


class RetrieverTrainSettings(Settings):
    """CoopRAG's retriever fine-tuning hyper-parameters (authors' values in methods.md §1.5; CPU-sized defaults)."""

    base: str = Field("minilm", description="encoder to start from")
    score: Literal["rala", "cosine"] = Field("rala", description="score inside the InfoNCE logit: rala (the paper's: "
                                                                 "RaLa's w * avg MaxSim from the encoder's layers) | "
                                                                 "cosine (sentence embeddings)")
    rala_layers: list[int] = Field([3], min_length=1, description="RaLa's premature layers C (the reranker's default)")
    rala_cls: Literal["mean", "cls"] = Field("mean", description="RaLa's sentence vector per layer")
    omega: bool = Field(True, description="RaLa's gap weight w; false trains avg MaxSim alone")
    epochs: int = Field(2, ge=1, description="passes over the training questions")
    batch_size: int = Field(16, ge=1, description="questions per step (in-batch negatives)")
    lr: float = Field(2e-5, gt=0, description="AdamW learning rate")
    weight_decay: float = Field(1e-5, ge=0, description="AdamW weight decay")
    warmup: float = Field(0.1, ge=0, le=1, description="linear warm-up, a fraction of the steps")
    clip: float = Field(10.0, gt=0, description="gradient norm clip")
    temperature: float = Field(0.05, gt=0, description="InfoNCE temperature (initial value when learned)")
    learn_temperature: bool = Field(True, description="learn the temperature")
    alpha: bool = Field(True, description="difficulty weights ln(1+|S|); false: every weight 1 (paper Table 5)")
    backward_weight: float = Field(1.0, ge=0, description="weight of the document->query term (0 = off)")
    max_length: int = Field(256, ge=8, description="token limit of queries and passages")
    max_minutes: float = Field(30.0, ge=0, description="stop training after this long (the model is saved)")
    max_steps: int | None = Field(None, ge=1, description="stop after this many optimizer steps (null: the epochs)")
    seed: int = Field(0, description="random seed (batches, negatives, initialisation)")


class RetrieverTrainRun(RetrieverTrainSettings):
    """``tandem train retriever``: the data it trains and evaluates on, and the hyper-parameters."""

    dataset: Path = Field(description="QA dataset with gold passages (its pool gives the negatives)")
    train_questions: str = Field("250:500", pattern=r"^\d*:\d*$", description="questions to train on, START:END")
    eval_questions: str = Field("0:250", pattern=r"^(\d*:\d*)?$", description="held-apart questions for R@2/R@5 "
                                                                              "before/after ('' = skip)")
    extra_dataset: list[Path] = Field([], description="more training data: the questions of these datasets")
    extra_limit: int | None = Field(None, ge=1, description="only the first N questions of each extra dataset")
    base_index: Path | None = Field(None, description="dense index of the dataset's pool built with base (skips "
                                                      "rebuilding it)")
    unrollings: Path | None = Field(None, description="unrolling cache JSONL (id, sub_questions, chain): train on U")
    query: Literal["q", "q+s", "q+r", "q+s+r"] = Field("q+s+r", description="parts of U with unrollings")
    eval_pool: Literal["all", "own"] = Field("all", description="passages the held-apart questions search: all (the "
                                                                "dataset's pool) | own (their own context passages)")
    eval_rala: bool = Field(False, description="also evaluate dense top-100 + RaLa reranking before/after")

    def hyper(self) -> RetrieverTrainSettings:
        """The hyper-parameters alone."""
        return RetrieverTrainSettings.from_dict({k: v for k, v in self.to_dict().items()
                                                 if k in RetrieverTrainSettings.model_fields})


def summary(spec: RetrieverTrainRun, report: dict[str, Any], out: Path) -> list[str | tuple[str, dict[str, Any]]]:
    """What ``tandem train retriever`` shows of ``report``: (title, row) tables of R@2 / R@5 before and after
    training, then the folder written."""
    before, after, log = report["before"], report["after"], report["train"]
    shown: list[str | tuple[str, dict[str, Any]]] = []
    if before and after:
        shown.append((f"dense retrieval on questions {spec.eval_questions} (R@2 / R@5, %)",
                      {"base R@2": before["R@2"], "base R@5": before["R@5"], "tuned R@2": after["R@2"],
                       "tuned R@5": after["R@5"], "train minutes": log["minutes"]}))
        for key in ("rala rrf", "rala none"):
            if key in before:
                shown.append((f"dense top-100 + {key} (R@2 / R@5, %)",
                              {"base R@2": before[key]["R@2"], "base R@5": before[key]["R@5"],
                               "tuned R@2": after[key]["R@2"], "tuned R@5": after[key]["R@5"]}))
    return [*shown, f"wrote {out}"]


TRAINERS.register("retriever", settings=RetrieverTrainRun, folder="retriever", summary=summary,
                  doc="CoopRAG's retriever fine-tuning: difficulty-weighted InfoNCE, in-batch + one hard negative")(
    runs("tandem.methods.cooprag.train_retriever:run_training"))


__all__ = ["RetrieverTrainRun", "RetrieverTrainSettings"]
