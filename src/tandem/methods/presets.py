"""Named set-ups (``tandem eval qa --preset NAME``): per-method settings and run options applied under
whatever a config file or the command line sets.

``paper`` is DualRAG's controlled comparison (its Table 1, methods.md §3.6): every retrieving method
reads the same retrieval - dense top-50, reranked, top-10 - the baselines sample at temperature 0.3
as the authors' code does, DualRAG writes its full answer, and every run is scored with the
re-answer step and the LLM judge (the run's own LLM unless ``--judge`` names another). The paper's
reranker is bge-reranker-v2-m3, which cannot be downloaded here: the preset uses the offline
bi-encoder, and ``--set reranker=cross_encoder --set reranker_model=PATH`` restores the paper's.
CoopRAG and R²AG keep their own papers' set-ups (their defaults)."""

from __future__ import annotations

from typing import Any

from tandem.errors import ConfigError

SAME_LLM = "same"  # a preset's judge: the run's own LLM

_READ_50_10 = {"reranker": "bi_encoder"}
PRESETS: dict[str, dict[str, Any]] = {
    "paper": {
        "run": {"reanswer": True, "judge": SAME_LLM},
        "settings": {
            "direct": {"temperature": 0.0},
            "naive_rag": {**_READ_50_10, "candidates": 50, "k": 10, "temperature": 0.3},
            "ircot": {**_READ_50_10, "candidates": 50, "k": 10, "temperature": 0.3},
            "iter_retgen": {**_READ_50_10, "candidates": 50, "k": 10},
            "genground": {**_READ_50_10, "candidates": 50, "k": 10},
            "metarag": {**_READ_50_10, "candidates": 50, "k": 10},
            "dualrag": {**_READ_50_10, "candidates": 50, "k": 10, "answer_style": "complete"},
        },
    },
}


def preset(name: str, method: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(run options, method settings) of preset ``name`` for ``method``; an unknown name is a ConfigError."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; presets: {sorted(PRESETS)}")
    chosen = PRESETS[name]
    return dict(chosen["run"]), dict(chosen["settings"].get(method, {}))
