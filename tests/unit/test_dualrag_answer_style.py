"""DualRAG's short answer follows the answer LLM's answer style: for ``instruction_yes_no`` (the 1.5B's) its head
names no yes/no and "Answer yes or no." is asked only where the question asks yes or no."""

from __future__ import annotations

from dualrag_script import QUESTION, Roles, plan, think

from tandem.methods.dualrag import prompts as P
from tandem.types import Question

YES_NO = '"yes" or "no"'


def test_the_head_names_yes_no_only_for_the_system_style():
    plain = P.answer_messages("K", "Who founded it?", ["step"], "short", "system")[0].content
    brief = P.answer_messages("K", "Who founded it?", ["step"], "short", "instruction_yes_no")[0].content
    verdict = P.answer_messages("K", "Is it in Poland?", ["step"], "short", "instruction_yes_no")[0].content
    assert YES_NO in plain and YES_NO not in brief and YES_NO not in verdict
    assert "No sentence, no explanation." in brief and brief.rstrip().endswith("## Answer")
    assert verdict.rstrip().endswith("## Answer\n\n" + P.YES_NO_INSTRUCTION)
    # the paper's complete answer is the same for every model
    assert (P.answer_messages("K", "Q?", ["s"], "complete", "instruction_yes_no")
            == P.answer_messages("K", "Q?", ["s"], "complete", "system"))


def test_the_answer_call_reads_the_answer_llms_style(search):
    def answer(question: Question, style: str | None) -> str:
        roles = Roles(reasoner=[think("I need the birthplace of Marie Curie."),
                                think("Marie Curie was born in Warsaw.", retrieve=False)],
                      entity=[plan(("Marie Curie", ["Marie Curie born"]))], summarizer=["Marie Curie was born in Warsaw."])
        if style:
            roles.llms["answer"].answer_style = style
        roles.method(search).answer(question)
        return roles.prompts("answer")[0]

    assert YES_NO in answer(QUESTION, None)  # a model without a style of its own: the head as the paper's
    assert YES_NO not in answer(QUESTION, "instruction_yes_no")
    asks = Question("q2", "Is the Vistula the river of the city where Marie Curie was born?", ("yes",), ())
    assert answer(asks, "instruction_yes_no").rstrip().endswith(P.YES_NO_INSTRUCTION)
