"""DualRAG-FT's trainer, ``tandem train sft``: its settings (the LoRA hyper-parameters, and the data and base
model it tunes) and its entry in :data:`tandem.registry.TRAINERS`, imported with the package. The entry also carries
the data export (``tandem export sft``, :mod:`.sft_export`). The command line's options are generated from
:class:`SFTRun`; the training code (:mod:`.finetune`: torch, peft) loads when the trainer runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from tandem.methods.dualrag.prompts import ROLES
from tandem.registry import TRAINERS
from tandem.settings import Settings
from tandem.train.specs import runs


class SFTSettings(Settings):
    """``tandem train sft`` (docs/methods/dualrag.md, "DualRAG-FT")."""

    roles: list[str] = Field(default_factory=lambda: list(ROLES), description="roles to train on (comma-separated "
                                                                              "or repeated): " + ", ".join(ROLES))
    mode: Literal["merged", "per-role"] = Field("merged", description="merged: one model over all roles; "
                                                                      "per-role: one model per role in out/ROLE/",
                                                json_schema_extra={"cli": ["--per-role/--merged"],
                                                                   "cli_values": ["per-role", "merged"]})
    lora_r: int = Field(16, ge=1, description="LoRA rank")
    lora_alpha: int = Field(32, ge=1, description="LoRA scale numerator (scale = alpha / r)")
    lora_dropout: float = Field(0.05, ge=0.0, lt=1.0, description="dropout on the LoRA input")
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
                                      description="linear layers that get a LoRA")
    lr: float = Field(2e-4, gt=0.0, description="AdamW learning rate (after warm-up)")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay")
    warmup: float = Field(0.03, ge=0.0, le=1.0, description="fraction of the planned steps with a linear warm-up")
    clip: float = Field(1.0, gt=0.0, description="gradient norm clipping")
    epochs: int = Field(1, ge=1, description="passes over the examples")
    batch_size: int = Field(4, ge=1, description="examples per optimizer step (accumulated one by one, no padding)")
    max_length: int = Field(4096, ge=8, description="examples with more tokens are skipped (counted in sft.json)")
    max_steps: int | None = Field(None, ge=1, description="stop after this many optimizer steps (null: all epochs)")
    max_minutes: float = Field(30.0, gt=0.0, description="stop after this long (checkpoint and model are saved)")
    save_every: int = Field(10, ge=1, description="checkpoint every N optimizer steps")
    seed: int = Field(42, description="seed of the LoRA initialisation, dropout and data order")

    @field_validator("roles", mode="before")
    @classmethod
    def _split_roles(cls, value: Any) -> Any:
        """``"reasoner,summarizer"`` (the command line's ``--roles``) as a list; blanks dropped."""
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            return [r.strip() for v in value for r in v.split(",") if r.strip()]
        return value

    @model_validator(mode="after")
    def _known_roles(self) -> Self:
        unknown = sorted(set(self.roles) - set(ROLES))
        if unknown or not self.roles:
            raise ValueError(f"unknown or no roles {unknown}; roles: {list(ROLES)}")
        return self


class SFTRun(SFTSettings):
    """``tandem train sft``: the chat data and base model it tunes, and the LoRA hyper-parameters."""

    data: Path = Field(description="a `tandem export sft` folder (ROLE.jsonl chat examples)",
                       json_schema_extra={"cli_argument": True})
    llm: str = Field("local", description="base model: local | hf:PATH")
    llm_options: list[str] = Field([], description="backend option KEY=VALUE (num_threads, dtype, ...)",
                                   json_schema_extra={"cli": ["--llm-opt"]})

    def hyper(self) -> SFTSettings:
        """The hyper-parameters alone (what ``sft.json`` and a resumed run compare)."""
        return SFTSettings.from_dict({k: v for k, v in self.to_dict().items() if k in SFTSettings.model_fields})


def summary(spec: SFTRun, log: dict[str, Any], out: Path) -> list[str]:
    """What ``tandem train sft`` shows of the ``sft.json`` record ``log``: one line per model trained (steps,
    examples, minutes, whether it finished), then the folder written and how to load it."""
    per_role = spec.mode == "per-role"
    models = log["roles"] if per_role else {"+".join(spec.roles): log}
    lines = []
    for name, entry in models.items():
        if "skipped" in entry:
            lines.append(f"{name}: skipped ({entry['skipped']})")
            continue
        state = ("already finished; nothing to do" if entry.get("already_finished") else
                 "finished" if entry["finished"] else f"stopped ({entry['stopped_early']}); re-run to continue")
        lines.append(f"{name}: {entry['steps']}/{entry['planned_steps']} steps, {entry['examples']} examples, "
                     f"{entry['minutes']} min: {state}")
    return [*lines, f"wrote {out} (load with --llm hf:{out}{'/ROLE' if per_role else ''})"]


TRAINERS.register("sft", settings=SFTRun, method="dualrag", folder="sft-model", replacing=False, summary=summary,
                  out="Model folder (loads as hf:FOLDER; per-role: FOLDER/ROLE). Re-running continues it.",
                  export=runs("tandem.methods.dualrag.sft_export:export_sft"),
                  doc="DualRAG-FT: LoRA fine-tuning on the roles' chat examples (loss on the reply only), merged into "
                      "the base.")(runs("tandem.methods.dualrag.finetune:run_training"))


__all__ = ["SFTRun", "SFTSettings"]
