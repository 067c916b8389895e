"""Scripted DualRAG roles for the DualRAG unit tests: one FakeLLM per role, their JSON replies, a reranker
that records its queries."""

from __future__ import annotations

import json

from tandem.methods import Search
from tandem.methods.dualrag import DualRAG
from tandem.methods.dualrag.settings import DualRAGSettings
from tandem.testing.fake_llm import FakeLLM
from tandem.types import Hit, Question

QUESTION = Question("q1", "Which river flows through the city where Marie Curie was born?", ("Vistula",), ("d1", "d3"))


def think(thought: str, retrieve: bool = True) -> str:
    return json.dumps({"thought": thought, "need_retrieve": retrieve})


def note(text: str) -> str:
    return json.dumps({"notes": text})


def plan(*entities: tuple[str, list[str]]) -> str:
    return json.dumps({"entities": [{"entity": e, "keywords": k} for e, k in entities]})


class Roles:
    """One scripted FakeLLM per role; ``method()`` wires them into DualRAG."""

    def __init__(self, reasoner=(), entity=(), summarizer=(), answer=("Vistula",)) -> None:
        self.llms = {
            "reasoner": FakeLLM(responses=list(reasoner)),
            "entity_identifier": FakeLLM(responses=list(entity)),
            "summarizer": FakeLLM(responses=[note(s) for s in summarizer]),
            "answer": FakeLLM(responses=list(answer)),
        }

    def method(self, search: Search, **hyper) -> DualRAG:
        hyper.setdefault("k", 2)
        hyper.setdefault("question_query", False)  # the paper's plan: the Entity Identifier's keywords only
        reranker = hyper.pop("reranker", None)  # a test reranker object; settings hold only the algorithm's
        return DualRAG(self.llms["answer"], search, DualRAGSettings.from_dict(hyper), reranker=reranker,
                       role_llms=self.llms)

    def prompts(self, role: str) -> list[str]:
        return [c.last_user for c in self.llms[role].calls]


class RecordingReranker:
    """Reverses the candidate order and records the queries it was given."""

    name = "recording"

    def __init__(self) -> None:
        self.queries: list[str] = []

    def rerank(self, query, hits, k=None):
        self.queries.append(query)
        out = list(reversed(hits))[:k]
        return [Hit(h.doc_id, float(len(out) - i), i + 1, self.name) for i, h in enumerate(out)]


def two_hop_roles() -> Roles:
    return Roles(
        reasoner=[think("I need the birthplace of Marie Curie."),
                  think("Marie Curie was born in Warsaw. I need the river of Warsaw."),
                  think("Warsaw is on the Vistula, so the answer is the Vistula.", retrieve=False)],
        entity=[plan(("Marie Curie", ["Marie Curie born"])),
                plan(("Warsaw", ["Warsaw river", "river through Warsaw"]))],
        summarizer=["Marie Curie was born in Warsaw.", "Warsaw is the capital of Poland on the Vistula river."],
    )
