"""DualRAG's grounded notes (``grounded_notes``): a Summarizer sentence naming what no document read and not
the question names is dropped, listed in the step's notes, and an entity left with nothing is not kept."""

from __future__ import annotations

from dualrag_script import QUESTION, Roles, plan, think

from tandem.methods.dualrag.parse import ground_notes, names_in


def test_names_are_capitalised_runs_less_possessives_and_leading_function_words():
    assert names_in("The film starring Jamie Harris's friend was shot in the University of Virginia.") == [
        "Jamie Harris", "University of Virginia"]
    assert names_in("In 1855 it was founded. None of them.") == []


def test_a_sentence_naming_what_no_source_names_is_dropped_case_and_punctuation_blind():
    sources = ["Who directed the film in which Jamie Harris played The Hook-Handed Man?",
               "##### Lemony Snicket\n\nThe film was directed by Brad Silberling in the U.S."]
    kept, dropped = ground_notes("Jamie Harris played the hook-handed man. It was directed by Andrei Tarkovsky. "
                                 "Brad Silberling directed it in the U.S. in 2004.", sources)
    assert kept == "Jamie Harris played the hook-handed man. Brad Silberling directed it in the U.S. in 2004."
    assert dropped == ["It was directed by Andrei Tarkovsky."]
    assert ground_notes("Andrei Tarkovsky directed it.", sources) == ("None", ["Andrei Tarkovsky directed it."])
    assert ground_notes("None", sources) == ("None", [])


def test_the_outline_keeps_only_grounded_sentences_and_the_step_lists_the_dropped_ones(search):
    def roles() -> Roles:
        return Roles(reasoner=[think("I need the birthplace of Marie Curie."),
                               think("Marie Curie was born in Warsaw, so the answer is Warsaw.", retrieve=False)],
                     entity=[plan(("Marie Curie", ["Marie Curie born"]))],
                     summarizer=["Marie Curie was born in Warsaw. She was taught by Albert Einstein."])

    grounded = roles()
    ans = grounded.method(search, grounded_notes=True).answer(QUESTION)
    step = ans.trace.steps[0]
    assert step.notes["summaries"] == {"Marie Curie": "Marie Curie was born in Warsaw."}
    assert step.notes["ungrounded"] == ["She was taught by Albert Einstein."]
    assert "Einstein" not in grounded.prompts("reasoner")[1] and "born in Warsaw." in grounded.prompts("reasoner")[1]
    paper = roles()
    ans = paper.method(search).answer(QUESTION)
    assert "Albert Einstein" in ans.trace.steps[0].notes["summaries"]["Marie Curie"]
    assert "ungrounded" not in ans.trace.steps[0].notes
