"""DualRAG's settings (``--set KEY=VALUE``; the table in docs/methods/dualrag.md is written from this model)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Self

from pydantic import Field, model_validator

from tandem.methods.dualrag import prompts as P
from tandem.methods.settings import Reranker, RerankSettings, reranker_setting, temperature_setting
from tandem.settings import SERVER_ONLY


class DualRAGSettings(RerankSettings):
    """DualRAG (docs/methods/dualrag.md): Reasoner + Entity Identifier, Summarizer + Knowledge Outline."""

    #: ``--preset paper``: docs/methods/baselines.md, "The paper preset"
    presets: ClassVar[dict[str, dict[str, dict[str, Any]]]] = {"paper": {"settings": {"reranker": "bi_encoder", "candidates": 50, "k": 10, "answer_style": "complete"}}}

    renamed: ClassVar[dict[str, str]] = {"topk": "candidates", "rerank_topk": "k"}

    max_iter: int = Field(5, ge=1, description="reasoning steps (paper: 5)")
    candidates: int = Field(50, ge=1, description="first-stage hits per keyword (paper's topk: 50)")
    k: int = Field(10, ge=1, description="documents kept per entity after reranking, what one Summarizer call "
                                         "reads (paper's rerank_topk: 10; 5: a quarter fewer tokens, the 1.5B's "
                                         "notes keep more on bridge questions, docs/methods/dualrag.md)")
    reranker: Reranker = reranker_setting("bi_encoder", "reranker_model (the paper's bge-reranker-v2-m3); none: the ablation")
    keyword_retriever: Literal["dense", "index"] = Field("dense", description="dense: the index's dense part even "
                                                                              "on a hybrid index; index: its own "
                                                                              "retriever; a --retriever other than "
                                                                              "the index's kind (graph, bm25 on a "
                                                                              "hybrid index) is searched either way", json_schema_extra=SERVER_ONLY)
    knowledge_first: bool = Field(True, description="a Reasoner's 'no retrieval needed' before any knowledge is "
                                                    "read is overruled and its guess dropped (the paper's rule: "
                                                    "reason only from retrieved knowledge); false: the authors' "
                                                    "code, where step 1 may answer from memory")
    question_query: bool = Field(True, description="while nothing is read yet, the question itself is searched too "
                                                   "(under 'else'), beside the Entity Identifier's keywords; false: "
                                                   "its keywords only, as the paper")
    question_docs: int = Field(5, ge=0, description="with question_query, while nothing is read: the run's "
                                                    "retriever's top question_docs passages for the question "
                                                    "(what NativeRAG reads, its k) lead 'else''s k documents "
                                                    "whatever the reranker makes of them; 0: the question is "
                                                    "one more keyword only")
    stop_when_stuck: bool = Field(True, description="answer once a step repeats the last thought and reads no "
                                                    "new document (nothing can change; false: always run to "
                                                    "max_iter, as the authors' code)")
    empty_outline: Literal["documents", "none"] = Field("documents", description="what the answer reads when the "
                                                                         "Summarizer kept nothing: documents: the "
                                                                         "passages read, best "
                                                                         "empty_outline_docs for the question "
                                                                         "first; none: the empty outline (the "
                                                                         "paper)")
    forget_dropped: bool = Field(False, description="an entity removed because the Summarizer kept nothing "
                                                    "forgets the documents it read, so a later step sends it "
                                                    "the same documents again (the authors' code); false: "
                                                    "they stay read (the paper: only documents the entity "
                                                    "has not read are passed)")
    empty_outline_docs: int = Field(5, ge=1, description="passages the answer reads when the outline is empty")
    answer_docs: int = Field(0, ge=0, description="passages the answer reads after a non-empty outline: the "
                                                  "question's own hits (question_docs) first, then the passages "
                                                  "read that best match the question; 0: the outline alone "
                                                  "(the paper); not with use_outline=false, whose "
                                                  "outline holds the passages read")
    grounded_notes: bool = Field(False, description="drop each sentence of the Summarizer's notes that names "
                                                    "something (a capitalised name) neither the documents it "
                                                    "read nor the question name: a small model's guess; the "
                                                    "step's notes list what was dropped (false: the paper)")
    answer_reasoning: bool = Field(True, description="the answer reads the Reasoner's history too (the paper); "
                                                     "false: knowledge and question only")
    use_reasoner: bool = Field(True, description="false = ablation 'w/o R' (IRCoT-style sentences)")
    use_entity_identifier: bool = Field(True, description="false = ablation 'w/o EI' (the thought is the query)")
    use_outline: bool = Field(True, description="false = ablation 'w/o KO' (raw documents, no summaries)")
    answer_style: Literal["short", "complete"] = Field("short", description="short: one short answer like the "
                                                                            "baselines; complete: the paper's "
                                                                            "free-text answer (use --reanswer)")
    max_entities: int | None = Field(None, ge=1, description="cap on entities per Entity Identifier reply "
                                                             "(null = none, as in the paper)")
    role_llms: dict[str, str | dict[str, Any]] = Field(
        default_factory=dict, description="role -> LLM spec, or {\"spec\": SPEC, OPTION: VALUE, ...} with that "
        "backend's options (as --llm-opt gives the run's LLM); roles: " + ", ".join(P.ROLES), json_schema_extra=SERVER_ONLY)
    send_schema: bool = Field(True, description="send each JSON role's bounded schema (false = prompt-only)")
    parallel_summaries: bool = Field(True, description="summarize a step's entities at once where the "
                                                       "Summarizer's LLM batches concurrent requests (the same "
                                                       "calls, trace and outline; false: one after another)")
    max_tokens: dict[str, int] = Field(default_factory=dict, description="per-role token budgets, e.g. "
                                                                         "{'reasoner': 512}", json_schema_extra=SERVER_ONLY)
    temperature: float = temperature_setting()

    @model_validator(mode="after")
    def _roles(self) -> Self:
        unknown = sorted(set(self.role_llms) - set(P.ROLES))
        if unknown:
            raise ValueError(f"unknown DualRAG role(s) {unknown} in role_llms; roles: {list(P.ROLES)}")
        for role, spec in self.role_llms.items():
            if isinstance(spec, dict) and not isinstance(spec.get("spec"), str):
                raise ValueError(f"role_llms[{role!r}]: a mapping needs 'spec' (an LLM spec string) beside the "
                                 "backend's options, e.g. {\"spec\": \"local:qwen2.5-coder-0.5b\", \"dtype\": \"bfloat16\"}")
        return self
