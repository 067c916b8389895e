"""One QA evaluation run - what ``tandem eval qa`` runs and ``tandem.evaluate`` exposes: the dataset loaded,
the method built from its :class:`~tandem.config.RunConfig`, every question answered into a run folder
(predictions with traces, metrics), resumable."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tandem.config import RunConfig, read_config_file
from tandem.errors import ConfigError
from tandem.eval.runner import RESUME_PATHS
from tandem.methods.base import Method
from tandem.outdir import owned_output
from tandem.secrets import redact

OnRecord = Callable[[dict[str, Any], dict[str, Any]], None]
RESPONSE_CACHE = "llm-cache.sqlite"  # a run folder's response cache (tandem.llm.cache.CachedLLM)


def build_run(cfg: RunConfig, cache: Path | None = None, passages: list | None = None) -> tuple[Method, Any, Any]:
    """``cfg``'s run through the one builder (:func:`tandem.compose.build_run`; a preset keeps the index's own
    retriever kind); returns (method, llm, store)."""
    from tandem.compose import build_run as build

    run = build(cfg.method, cfg.llm.spec, cfg.index, cfg.settings, retriever=cfg.retriever, passages=passages,
                llm_options={**cfg.llm.options, **({"cache": cache} if cache else {})}, keep_index_kind=bool(cfg.preset))
    return run.method, run.llm, run.store


def as_run_config(config: RunConfig | Mapping[str, Any] | str | Path) -> RunConfig:
    """A run config from a model, a mapping, or a YAML / JSON file (a run folder's ``config.json`` is one)."""
    if isinstance(config, RunConfig):
        return config
    if isinstance(config, (str, Path)):
        return RunConfig.from_dict(read_config_file(config), where=str(config))
    return RunConfig.from_dict(config)


def evaluate(config: RunConfig | Mapping[str, Any] | str | Path, out: str | Path, *, retry_errors: bool = False,
             allow_code_change: bool = False, skip_bad: bool = False, max_failures: int = 3, on_record: OnRecord | None = None,
             dataset: Any = None) -> dict[str, Any]:
    """Run ``config``'s method over its dataset into run folder ``out`` (resumed where it stopped; a folder that
    is not a run folder of this kind is refused) and return the metrics (also in ``out/metrics.json``).

    ``on_record(record, running_metrics)`` is called after each question; ``dataset`` is the loaded dataset
    when the caller has it already (else ``config.dataset`` is read). A folder whose saved answers were made
    by other code of the method is refused unless ``allow_code_change`` (:mod:`tandem.eval.codecheck`)."""
    from tandem.corpus import load_dataset
    from tandem.eval.rundir import RunDir
    from tandem.eval.runner import run_qa
    from tandem.llm import load_llm

    cfg = as_run_config(config)
    if cfg.dataset is None and dataset is None:
        raise ConfigError("give a dataset (--dataset FILE, or dataset: in the config)")
    out = Path(out)
    with owned_output(out, "qa-run", replacing=False):  # before any work, and before the cache file is created
        ds = dataset if dataset is not None else load_dataset(Path(str(cfg.dataset)), format=cfg.format,
                                                              skip_bad=skip_bad)
        questions = cfg.select(ds.questions)
        cache_path = out / RESPONSE_CACHE if cfg.cache else None
        RunDir(out, "qa-run")
        method, main_llm, _ = build_run(cfg, cache_path, ds.passages)
        judge = cfg.judge
        judge_llm = None
        if judge:
            judge_llm = main_llm if judge == cfg.llm.spec else load_llm(judge, **({"cache": cache_path} if cache_path
                                                                                  else {}))
        record = cfg.to_dict() | {"format": ds.format, "llm": {**cfg.llm.to_dict(), "spec": redact(cfg.llm.spec)},
                                  "judge": redact(judge) if judge else None,
                                  "notes": {**cfg.notes, **getattr(method, "build_notes", {}), **_engine_note(main_llm),
                                            **_where(cfg)}}
        return run_qa(method, questions, out, record, concurrency=cfg.concurrency, judge_llm=judge_llm,
                      reanswer_llm=main_llm if cfg.reanswer else None, reanswer_prompt=cfg.reanswer_prompt,
                      calibrate=cfg.judge_calibration, self_judged=judge_llm is main_llm, retry_errors=retry_errors,
                      allow_code_change=allow_code_change, max_consecutive_failures=max_failures, on_record=on_record)


def _where(cfg: RunConfig) -> dict[str, str]:
    """The dataset's and the index's absolute paths (``dataset_path``, ``index_path``), so a run started as
    ``--index runs/x`` resumes from another folder as ``--index ../main/runs/x`` (:data:`RESUME_PATHS`)."""
    return {f"{key}_path": str(Path(value).resolve()) for key in RESUME_PATHS if (value := getattr(cfg, key))}


def _engine_note(llm: Any) -> dict[str, str]:
    """``{"llm_engine": ...}``: what an in-process LLM computes with (engine, weights, precision, threads), so a
    run says which engine answered even where its options left that to the defaults; empty for servers."""
    note = getattr(llm, "engine_note", None)
    return {"llm_engine": note} if isinstance(note, str) else {}


__all__ = ["as_run_config", "build_run", "evaluate"]
