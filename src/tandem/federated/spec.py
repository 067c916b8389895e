"""A run's settings as one typed object, shipped to Flower clients as JSON inside the message."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, field_validator

from tandem.errors import ConfigError
from tandem.federated.bench_io import Bench
from tandem.federated.local_training import TrainSettings
from tandem.federated.model import ModelConfig
from tandem.settings import Settings


class RunSpec(Settings):
    """Everything a CoRAG run needs: bench, store variant, shots, rounds, model and optimiser settings
    (``tandem federate simulate``'s options are generated from these fields and the nested ones)."""

    bench: str = Field(description="bench folder from `tandem federate build-bench`")
    variant: str = Field("REL", description="training-store variant: REL | IRR | REL-1 | SPLIT, or one of the paper's "
                                            "Table 2 compositions: REL-ONLY | HN+IRR | REL+HN | REL+IRR | TOP1+IRR")
    shots: int = Field(16, ge=1, description="labelled pairs per client (a k-shot set of the bench)")
    clients: int | None = Field(None, ge=1, description="use the first N clients of the bench (null: all)")
    rounds: int = Field(2, ge=1, description="FedAvg rounds (baselines train rounds x epochs epochs)")
    eval_rounds: tuple[int, ...] = Field((), description="extra rounds evaluated on the test stores (the last always is)")
    split: Literal["test", "dev"] = Field("test", description="the questions evaluated")
    eval_limit: int | None = Field(20, ge=0, description="test questions per client evaluated (0 or null: all)")
    eval_batch: int = Field(4, ge=1, description="questions answered per reader batch at evaluation")
    threads: int | None = Field(None, ge=1, description="torch threads per client (null: TANDEM_LLM_THREADS / torch)")
    out_dir: str | None = Field(None, description="the run folder (set by the command)")
    model: ModelConfig = Field(default_factory=ModelConfig, description="model settings shared by every client")
    train: TrainSettings = Field(default_factory=TrainSettings, description="local optimisation settings")

    @field_validator("eval_limit")
    @classmethod
    def _all_is_none(cls, value: int | None) -> int | None:
        return value or None

    @field_validator("eval_rounds", mode="before")
    @classmethod
    def _rounds_list(cls, value: Any) -> Any:
        return [int(x) for x in value.split(",") if x.strip()] if isinstance(value, str) else value

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        return cls.from_dict(json.loads(text), where="run spec")

    @classmethod
    def from_run_config(cls, config: dict[str, Any]) -> RunSpec:
        """From a Flower run config (``[tool.flwr.app.config]`` / ``--run-config``): kebab-case keys;
        ``model.*`` / ``train.*`` prefixes set the nested settings."""
        raw: dict[str, Any] = {"model": {}, "train": {}}
        for key, value in config.items():
            name = key.replace("-", "_")
            head, _, tail = name.partition(".")
            if tail and head in ("model", "train"):
                raw[head][tail] = value
            elif name in ("clients", "eval_limit", "threads") and value in ("", 0, None):
                raw[name] = None
            else:
                raw[name] = value
        if "bench" not in raw:
            raise ConfigError("the run config needs 'bench' (path of a bench folder built by `tandem federate build-bench`)")
        return cls.from_dict(raw)

    def client_count(self, bench_clients: int) -> int:
        """Clients taking part: ``clients`` if set (checked against the bench), else all of them."""
        if self.clients is None:
            return bench_clients
        if not 1 <= self.clients <= bench_clients:
            raise ConfigError(f"clients={self.clients} but the bench has {bench_clients}")
        return self.clients

    def evaluated(self, server_round: int) -> bool:
        return server_round == self.rounds or server_round in self.eval_rounds


def check_spec(spec: RunSpec) -> Bench:
    """Open the bench and check the run settings against it before any model is loaded."""
    bench = Bench(spec.bench)
    bench.train_store(spec.variant, None)  # unknown variant -> ConfigError naming the variants
    spec.client_count(bench.clients)
    if not 1 <= spec.shots <= max(bench.manifest["shots"]):
        raise ConfigError(f"shots={spec.shots}; the bench has 1..{max(bench.manifest['shots'])} training pairs per client")
    return bench
