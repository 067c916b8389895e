"""NaiveRAG's settings (``--set KEY=VALUE``; the table in docs/methods is written from this model)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from tandem.methods.settings import ReadSettings, temperature_setting


class NaiveRAGSettings(ReadSettings):
    """NativeRAG: retrieve with the question, optionally rerank ``candidates``, answer from the top ``k``."""

    #: ``--preset paper``: docs/methods/baselines.md, "The paper preset"
    presets: ClassVar[dict[str, dict[str, dict[str, Any]]]] = {"paper": {
        "settings": {"reranker": "bi_encoder", "first_stage": "bm25", "candidates": 50, "k": 10, "temperature": 0.3,
                     "yes_no_threshold": "off", "choice_orders": "asked"},  # the papers read the reply
        "run": {"reanswer": False}}}

    temperature: float = temperature_setting()
    max_tokens: int = Field(32, ge=1, description="answer tokens")
    doc_order: Literal["best_first", "best_last"] = Field(
        "best_first", description="the documents' order in the prompt: the best-ranked first (the papers'), or "
                                  "last, next to the question (docs/methods/baselines.md)")
    question_first: bool = Field(
        False, description="state the question before the documents as well as after them "
                           "(docs/methods/baselines.md)")
    reason_choices: bool = Field(
        False, description="a question that offers a choice (\"A or B?\") is asked for a line of facts, then "
                           "the answer (docs/methods/baselines-measured.md, \"Choice questions\")")
    yes_no_threshold: float | Literal["model", "off"] = Field(
        "model", description="answer a question that asks yes or no \"yes\" where the first-token margin log "
                             "P(yes) - log P(no) is above this threshold, else \"no\"; model: the model's own "
                             "(the 1.5B's 1.875; none: the reply), off: the reply (docs/methods/"
                             "baselines-measured.md, \"Yes/no questions\")")
    choice_orders: Literal["model", "asked", "both", "unnamed"] = Field(
        "model", description="a question that offers a choice (\"A or B?\"): both: asked with the options as "
                             "written and swapped, answered by the option whose first token is likelier over the "
                             "two; unnamed: the reply, or both where it names neither option; asked: the reply; "
                             "model: the model's own (docs/methods/baselines-measured.md, \"Choice questions\")")
