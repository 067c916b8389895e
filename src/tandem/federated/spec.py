"""A run's settings as one typed object, shipped to Flower clients as JSON inside the message."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from tandem.errors import ConfigError
from tandem.federated.bench_io import Bench
from tandem.federated.local import TrainSettings
from tandem.federated.model import ModelConfig


@dataclass
class RunSpec:
    """Everything a CoRAG run needs: bench, store variant, shots, rounds, model and optimiser settings."""

    bench: str
    variant: str = "REL"
    shots: int = 16
    clients: int | None = None  # first N clients of the bench (None: all)
    rounds: int = 2
    eval_rounds: tuple[int, ...] = ()  # rounds evaluated on the test stores (the last one always)
    split: str = "test"
    eval_limit: int | None = 25  # questions per client evaluated
    eval_batch: int = 4
    threads: int | None = None
    out_dir: str | None = None
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainSettings = field(default_factory=TrainSettings)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunSpec:
        """Build from a plain dict (unknown keys are errors)."""
        raw = dict(raw)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"unknown run settings {unknown}; known: {sorted(known)}")
        model = _sub(ModelConfig, raw.pop("model", {}) or {})
        train = _sub(TrainSettings, raw.pop("train", {}) or {})
        if "eval_rounds" in raw:
            raw["eval_rounds"] = tuple(int(r) for r in raw["eval_rounds"])
        return cls(**raw, model=model, train=train)

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        return cls.from_dict(json.loads(text))

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
            elif name == "eval_rounds":
                raw[name] = [int(x) for x in str(value).split(",") if x.strip()]
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


def _sub(kind: type, raw: dict[str, Any]) -> Any:
    known = {f.name: f for f in fields(kind)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ConfigError(f"unknown {kind.__name__} settings {unknown}; known: {sorted(known)}")
    out = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
    return kind(**out)


def check_spec(spec: RunSpec) -> Bench:
    """Open the bench and check the run settings against it before any model is loaded."""
    bench = Bench(spec.bench)
    bench.train_store(spec.variant, None)  # unknown variant -> ConfigError naming the variants
    spec.client_count(bench.clients)
    if not 1 <= spec.shots <= max(bench.manifest["shots"]):
        raise ConfigError(f"shots={spec.shots}; the bench has 1..{max(bench.manifest['shots'])} training pairs per client")
    if spec.split not in ("dev", "test"):
        raise ConfigError(f"split must be 'dev' or 'test', got {spec.split!r}")
    if spec.rounds < 1:
        raise ConfigError(f"rounds must be >= 1, got {spec.rounds}")
    return bench
