"""Named set-ups (``tandem eval qa --preset NAME``): per-method settings and run options applied under
whatever a config file or the command line sets.

``paper`` gives each method its own paper's protocol (docs/methods/baselines.md, "The paper preset"):

- **The DualRAG baselines and DualRAG** (DualRAG's controlled comparison, its Table 2, methods.md §3.6):
  every retrieving method reads the same retrieval - top-50 candidates, reranked, top-10 - the
  baselines sample at temperature 0.3 as the authors' code does, DualRAG writes its full answer, and
  every run is scored with the LLM judge. Re-answer with the authors' answer-type prompt applies to
  every method except Direct, NativeRAG and Oracle, as the authors' evaluation does (methods.md §3.7).
  The paper reranks dense candidates with bge-reranker-v2-m3, which cannot be downloaded here; a
  bi-encoder with the index's own encoder over a dense first stage would reorder nothing
  (:func:`tandem.compose.identity_rerank`), so the baselines' first stage is the index's BM25 part and
  the MiniLM bi-encoder reranks it (a reranker that sees what the first stage did not). DualRAG keeps
  its dense keyword search: its reranker scores the union of the keywords' hits against the entity's
  name, another query than the first stage's, so the bi-encoder there reorders.
  ``--set reranker=cross_encoder --set reranker_model=PATH --set first_stage=dense`` restores the paper's.
- **CoopRAG**: RaLa as its paper reports it (methods.md §1.4): Eq. 4 alone (no fusion with the
  first stage), one premature layer per bucket of MiniLM's hidden states ({0, 2, 4}, as the authors'
  [0, 4, 7] of mpnet's twelve), the [CLS] vector; no re-answer.
- **R²AG**: its paper's fixed candidate lists (top-10 of the index's retriever, no reranking); no re-answer.

``run_by_method`` overrides the run options for the methods its paper scores differently."""

from __future__ import annotations

from typing import Any

from tandem.errors import ConfigError

SAME_LLM = "same"  # a preset's judge: the run's own LLM

_READ_50_10 = {"reranker": "bi_encoder", "first_stage": "bm25"}
_NO_REANSWER = {"reanswer": False}
PRESETS: dict[str, dict[str, Any]] = {
    "paper": {
        "run": {"reanswer": True, "reanswer_prompt": "answer_type", "judge": SAME_LLM},
        "run_by_method": {"direct": _NO_REANSWER, "naive_rag": _NO_REANSWER, "oracle": _NO_REANSWER,
                          "cooprag": _NO_REANSWER, "r2ag": _NO_REANSWER},
        "settings": {
            "direct": {"temperature": 0.0},
            "naive_rag": {**_READ_50_10, "candidates": 50, "k": 10, "temperature": 0.3},
            "ircot": {**_READ_50_10, "candidates": 50, "k": 10, "temperature": 0.3},
            "iter_retgen": {**_READ_50_10, "candidates": 50, "k": 10},
            "genground": {**_READ_50_10, "candidates": 50, "k": 10},
            "metarag": {**_READ_50_10, "candidates": 50, "k": 10},
            "dualrag": {"reranker": "bi_encoder", "candidates": 50, "k": 10, "answer_style": "complete"},
            "cooprag": {"fuse": "none", "layers": [0, 2, 4], "cls": "cls", "variant": "eq4"},
            "r2ag": {"docs": "retrieve", "k": 10},
        },
    },
}


def preset(name: str, method: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(run options, method settings) of preset ``name`` for ``method``; an unknown name is a ConfigError."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; presets: {sorted(PRESETS)}")
    chosen = PRESETS[name]
    run = {**chosen["run"], **chosen.get("run_by_method", {}).get(method, {})}
    return run, dict(chosen["settings"].get(method, {}))
