"""Typed, validated configuration of a run: the retriever and LLM parts, and the whole QA run (``tandem eval qa --config run.yaml``; a run folder's ``config.json`` is one).

Every model rejects unknown keys with the list of valid ones, and every field carries its default and
its documentation (``tandem methods NAME`` prints them)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Self, TypeVar

from pydantic import Field, model_validator

from tandem.errors import ConfigError
from tandem.registry import METHODS
from tandem.settings import Settings

T = TypeVar("T")


class RetrieverConfig(Settings):
    """Which retriever answers the method's searches over the index."""

    kind: str | None = Field(None, description="bm25 | dense | hybrid | graph (any registered retriever); "
                                               "None = the index's own kind")
    fusion: Literal["rrf", "weighted"] = Field("rrf", description="hybrid fusion: reciprocal-rank (c = 60) or "
                                                                  "min-max weighted scores")

    settings: dict[str, Any] = Field(default_factory=dict, description="the retriever's own settings "
                                                                         "(--retriever-opt KEY=VALUE), e.g. graph: "
                                                                         "seeds, damping, fusion_weight")

    def options(self, index_kind: str) -> dict[str, Any]:
        """Keyword options for :func:`tandem.retrieve.open_retriever`."""
        fusion = {"fusion": self.fusion} if (self.kind or index_kind) in ("hybrid", "graph") else {}
        return fusion | self.settings


class LLMConfig(Settings):
    """The LLM: a spec (``local``, ``hf:PATH``, ``openai:MODEL@URL``, ``llamacpp:PATH``) and backend options."""

    spec: str = Field("local", description="local | hf:PATH | openai:MODEL@URL | llamacpp:PATH")
    options: dict[str, Any] = Field(default_factory=dict, description="backend options (--llm-opt KEY=VALUE): "
                                                                      "json_mode, timeout, max_retries, ... "
                                                                      "(tandem llms NAME)")

    @model_validator(mode="after")
    def _check_options(self) -> Self:
        """The options checked against the backend's settings model (:mod:`tandem.llm.settings`); kept as given."""
        from tandem.llm.backends import backend_options

        backend_options(self.spec, self.options, where="llm.options")
        return self


class RunConfig(Settings):
    """A QA evaluation run: everything ``tandem eval qa`` needs, as written to the run's ``config.json``.

    ``settings`` are the method's settings, stored resolved (defaults included) so a re-run is exact."""

    task: Literal["qa"] = "qa"
    method: str = Field(description="a registered method (tandem methods)")
    dataset: str | None = Field(None, description="QA dataset file (eval qa needs one)")
    format: str | None = Field(None, description="force the dataset format (None = detected)")
    index: str | None = Field(None, description="index folder over the dataset's pool")
    retriever: RetrieverConfig = Field(default_factory=RetrieverConfig, description="the retriever over the index")
    llm: LLMConfig = Field(default_factory=LLMConfig, description="the method's LLM")
    settings: dict[str, Any] = Field(default_factory=dict, description="the method's settings (tandem methods NAME)")
    preset: str | None = Field(None, description="the named set-up the settings started from (e.g. paper)")
    judge: str | None = Field(None, description="LLM spec of the yes/no judge (adds the 'judge' metric)")
    reanswer: bool = Field(False, description="score max(raw, re-answered) as DualRAG's evaluation does")
    reanswer_prompt: Literal["brief", "answer_type"] = Field(
        "brief", description="re-answer prompt: brief = a generic brevity prompt; answer_type = the DualRAG authors' "
                             "kind, listing the dataset's answer-type distribution")
    judge_calibration: int = Field(100, ge=0, description="questions the judge is calibrated on (its own gold vs "
                                                          "wrong answers) before its column is trusted; 0 = none")
    offset: int = Field(0, ge=0, description="skip the first N questions (a held-out slice: --offset 250 --limit 50)")
    limit: int | None = Field(None, ge=1, description="only the first N questions (after --offset)")
    concurrency: int = Field(1, ge=1, description="questions in flight")
    cache: bool = Field(True, description="SQLite response cache in the run folder")
    notes: dict[str, str] = Field(default_factory=dict, description="what the run decided and records (e.g. a "
                                                                    "reranker skipped as the identity); not read")

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        return upgrade_legacy(data) if isinstance(data, dict) else data

    def select(self, questions: Sequence[T]) -> list[T]:
        """The questions this run answers: ``offset`` skipped, then at most ``limit``."""
        return select_questions(questions, self.offset, self.limit)

    @model_validator(mode="after")
    def _resolve(self) -> Self:
        """Validate the method's settings against its model and store them with their defaults."""
        resolved = METHODS.get(self.method).validate(self.settings, where=f"{self.method} settings")
        object.__setattr__(self, "settings", resolved.to_dict())
        return self


def select_questions(questions: Sequence[T], offset: int = 0, limit: int | None = None,
                     source: str = "the dataset") -> list[T]:
    """``questions`` with the first ``offset`` skipped, then at most ``limit`` (``eval qa`` and ``data inspect``
    slice alike); an offset past the end is a ConfigError naming ``source``."""
    if offset and offset >= len(questions):
        raise ConfigError(f"--offset {offset} skips every question: {source} has {len(questions)}")
    return list(questions[offset:offset + limit if limit else None])


def upgrade_legacy(data: Mapping[str, Any]) -> dict[str, Any]:
    """A run config written before typed configs (``llm`` as a string, ``llm_opts``, ``hyper``) in today's
    shape; today's shape is returned unchanged."""
    data = dict(data)
    if "hyper" in data:
        data["settings"] = data.pop("hyper") or {}
    if isinstance(data.get("llm"), str):
        data["llm"] = {"spec": data["llm"], "options": data.pop("llm_opts", None) or {}}
    data.pop("llm_opts", None)
    return data


def normalise_run_config(data: Mapping[str, Any]) -> dict[str, Any]:
    """A stored run config in today's shape with its method's settings resolved (so a folder written
    before typed configs resumes under the same command); left as upgraded when it does not validate."""
    upgraded = upgrade_legacy(data)
    try:
        resolved = RunConfig.from_dict(upgraded).to_dict()
    except ConfigError:
        return upgraded
    return {**upgraded, **{k: resolved[k] for k in ("settings", "retriever", "llm", "reanswer_prompt")}}


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A YAML or JSON mapping from ``path`` (by extension; YAML otherwise, which reads JSON too)."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark, as Windows editors write one, dropped
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{line}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file holds a mapping of settings, got {type(data).__name__}")
    return data
