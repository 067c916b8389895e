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
  (:func:`tandem.methods.parts.identity_rerank`), so the baselines' first stage is the index's BM25 part and
  the MiniLM bi-encoder reranks it (a reranker that sees what the first stage did not). DualRAG keeps
  its dense keyword search: its reranker scores the union of the keywords' hits against the entity's
  name, another query than the first stage's, so the bi-encoder there reorders.
  ``--set reranker=cross_encoder --set reranker_model=PATH --set first_stage=dense`` restores the paper's.
- **CoopRAG**: RaLa as its paper reports it (methods.md §1.4): Eq. 4 alone (no fusion with the
  first stage), one premature layer per bucket of MiniLM's hidden states ({0, 2, 4}, as the authors'
  [0, 4, 7] of mpnet's twelve), the [CLS] vector; no re-answer.
- **R²AG**: its paper's fixed candidate lists (top-10 of the index's retriever, no reranking); no re-answer.

Each method declares what a preset sets for it in its own settings model (``presets``, in its folder's
``settings.py``): its settings, and the run options its paper scores differently with (no re-answer for
Direct, NativeRAG, Oracle, CoopRAG and R²AG). This module holds the presets' names and their run options."""

from __future__ import annotations

from typing import Any

from tandem.errors import ConfigError

SAME_LLM = "same"  # a preset's judge: the run's own LLM

#: preset name -> the run options it sets for every method (a method's own ``presets`` may override them)
PRESETS: dict[str, dict[str, Any]] = {
    "paper": {"reanswer": True, "reanswer_prompt": "answer_type", "judge": SAME_LLM},
}


def preset(name: str, method: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(run options, method settings) of preset ``name`` for ``method``; an unknown name is a ConfigError."""
    from tandem.registry import METHODS

    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; presets: {sorted(PRESETS)}")
    own = METHODS.get(method).settings.presets.get(name, {})
    return {**PRESETS[name], **own.get("run", {})}, dict(own.get("settings", {}))
