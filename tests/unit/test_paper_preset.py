"""The paper preset: each paper's own protocol, a rerank that is never silently the identity, and a judge
that is calibrated before its column is trusted."""

from __future__ import annotations

import json
import re
import sys

import pytest
from tests.conftest import benchmark_script

from tandem.compose import build_method
from tandem.config import RunConfig
from tandem.errors import ConfigError
from tandem.eval.judge import (
    ANSWER_TYPE_PROMPT,
    RELIABLE,
    answer_type,
    answer_type_notes,
    calibrate_judge,
    calibration_pairs,
    judge_label,
    reanswer,
    reanswer_template,
)
from tandem.eval.runner import run_qa
from tandem.index import build_index, open_index
from tandem.llm import CachedLLM
from tandem.methods import Search
from tandem.methods.parts import identity_rerank
from tandem.methods.presets import preset
from tandem.methods.settings import RerankSettings
from tandem.outdir import claim_dir
from tandem.rerank import BiEncoderReranker
from tandem.retrieve import open_retriever
from tandem.testing.encoders import HashingEncoder
from tandem.testing.fake_llm import FakeLLM
from tandem.types import Question

QUESTIONS = [Question("q1", "Where was Marie Curie born?", ("Warsaw",)),
             Question("q2", "Which river flows through Paris?", ("the Seine",)),
             Question("q3", "Who discovered polonium?", ("Marie Curie",)),
             Question("q4", "Is Warsaw the capital of Poland?", ("yes",))]


@pytest.fixture
def hybrid(tmp_path, small_docs):
    enc = HashingEncoder()
    build_index(small_docs, tmp_path / "idx", kind="hybrid", encoder=enc)
    return open_index(tmp_path / "idx", encoder=enc)


def test_paper_preset_gives_each_paper_its_protocol():
    for method in ("direct", "naive_rag", "oracle", "cooprag", "r2ag"):
        run, _ = preset("paper", method)
        assert run["reanswer"] is False and run["judge"] == "same", method
    for method in ("ircot", "iter_retgen", "genground", "metarag", "dualrag"):
        run, settings = preset("paper", method)
        assert run["reanswer"] is True and run["reanswer_prompt"] == "answer_type", method
        assert settings["reranker"] == "bi_encoder", method
        assert settings.get("first_stage") == (None if method == "dualrag" else "bm25"), method
    _, cooprag = preset("paper", "cooprag")
    assert cooprag == {"fuse": "none", "layers": [0, 2, 4], "cls": "cls", "variant": "eq4"}
    assert preset("paper", "r2ag")[1] == {"docs": "retrieve", "k": 10}
    with pytest.raises(ConfigError, match="unknown preset"):
        preset("nope", "direct")
    # every preset setting is a valid setting of its method
    for method in ("naive_rag", "ircot", "iter_retgen", "genground", "metarag", "dualrag", "cooprag", "r2ag"):
        RunConfig.from_dict({"method": method, "settings": preset("paper", method)[1]})


def test_a_bi_encoder_over_its_own_dense_stage_is_detected_and_skipped(hybrid):
    dense = Search(open_retriever(hybrid, "dense"), hybrid.store)
    same = RerankSettings(reranker="bi_encoder")
    assert "identity" in identity_rerank(same, dense.retriever, hybrid)
    assert identity_rerank(same, open_retriever(hybrid, "bm25"), hybrid) is None
    assert identity_rerank(RerankSettings(reranker="bi_encoder", reranker_model="other"), dense.retriever, hybrid) is None
    method = build_method("naive_rag", FakeLLM(), dense, reranker="bi_encoder", candidates=4, k=2)
    assert method.reranker is None and method.build_notes["rerank"].startswith("skipped: bi_encoder over a dense")
    method = build_method("naive_rag", FakeLLM(), dense, reranker="bi_encoder", first_stage="bm25", candidates=4, k=2)
    assert isinstance(method.reranker, BiEncoderReranker) and method.search.retriever.name == "bm25"
    assert method.build_notes == {"rerank": "bm25 first stage, then bi_encoder"}


def test_first_stage_bm25_reorders_what_bm25_found(hybrid):
    """The bi-encoder over BM25 candidates returns an order that differs from BM25's own for some query."""
    dense = Search(open_retriever(hybrid, "dense"), hybrid.store)
    method = build_method("naive_rag", FakeLLM(), dense, reranker="bi_encoder", first_stage="bm25", candidates=5, k=5)
    bm25 = open_retriever(hybrid, "bm25")
    queries = ["Warsaw capital Poland river", "Curie born Paris physicist", "river Seine France capital"]
    changed = [q for q in queries
               if [h.doc_id for h in method.reranker.rerank(q, bm25.search(q, 5), 5)] != [h.doc_id for h in bm25.search(q, 5)]]
    assert changed


def test_answer_types_and_the_answer_type_prompt():
    assert [answer_type(a) for a in ("yes", "1867", "May 3, 1999", "42", "Marie Curie", "a red apple")] == [
        "yes/no", "a date or year", "a date or year", "a number", "a name or title", "a short phrase"]
    notes = answer_type_notes([q.answers for q in QUESTIONS])
    assert notes == "50% a name or title, 25% a short phrase, 25% yes/no"
    prompts = reanswer_template("answer_type", [q.answers for q in QUESTIONS])
    assert notes in prompts[True] and "{question}" in prompts[True] and "{types}" in ANSWER_TYPE_PROMPT
    assert "{types}" not in prompts[True] and "{types}" not in prompts[False]
    # a question that does not ask yes or no reads the distribution of the other answers only
    assert "yes/no" not in prompts[False] and "67% a name or title, 33% a short phrase" in prompts[False]
    llm = FakeLLM(default="Warsaw")
    assert reanswer(llm, "Who died first, George Archainbaud or Ralph Murphy?", "Ralph Murphy died later.",
                    prompts) == "Warsaw"
    assert reanswer(llm, "Were both born in Warsaw?", "Yes, both were.", prompts) == "Warsaw"
    assert "yes/no" not in llm.prompts[0] and "25% yes/no" in llm.prompts[1]
    with pytest.raises(ConfigError, match="re-answer prompt"):
        reanswer_template("chinese", [])


def test_calibration_pairs_hold_gold_and_wrong_answers():
    pairs = calibration_pairs([(q.text, q.answers) for q in QUESTIONS],
                              [{"question": "Where was Marie Curie born?", "prediction": "Paris", "golden_answers": ["Warsaw"]},
                               {"question": "Where was Marie Curie born?", "prediction": "in Warsaw", "golden_answers": ["Warsaw"]}])
    gold = [(q, a) for q, a, _, yes in pairs if yes]
    wrong = [(q, a) for q, a, golds, yes in pairs if not yes]
    assert gold == [(q.text, q.answers[0]) for q in QUESTIONS]
    assert len(wrong) == len(QUESTIONS) + 1 and ("Where was Marie Curie born?", "Paris") in wrong
    for q, a in wrong[:-1]:  # another question's gold, never the question's own
        own = next(x for x in QUESTIONS if x.text == q).answers[0]
        assert a != own and not set(a.lower().split()) & set(own.lower().split())


def _judge_by_truth(req) -> str:
    text = req.last_user
    pred = re.search(r"Prediction: (.*)\n", text).group(1)
    gold = re.search(r"Ground-truth: (.*)\n", text).group(1)
    return '{"verdict": "Yes"}' if gold.lower() in pred.lower() else '{"verdict": "No"}'


def test_a_judge_that_says_yes_to_everything_fails_calibration():
    items = [(q.text, q.answers) for q in QUESTIONS]
    yes_man = calibrate_judge(FakeLLM(default='{"verdict": "Yes"}'), items, self_judged=True)
    assert yes_man["yes_on_gold"] == 1.0 and yes_man["yes_on_wrong"] == 1.0
    assert yes_man["accuracy"] == 0.5 < RELIABLE and yes_man["reliable"] is False and yes_man["self_judged"]
    honest = calibrate_judge(FakeLLM(default=_judge_by_truth), items)
    assert honest["accuracy"] == 1.0 and honest["reliable"] is True and honest["yes_on_wrong"] == 0.0
    assert calibrate_judge(FakeLLM(default=_judge_by_truth), items, concurrency=4) == honest  # pairs judged 4 at a time
    assert judge_label({"judge": 1.0, "judge_calibration": yes_man}) == "1.000 (self; unreliable: calibration 0.50)"
    assert judge_label({"judge": 0.5, "judge_calibration": honest}) == "0.500"
    assert judge_label({"judge": 0.5}) == "0.500 (uncalibrated)"


def test_run_qa_records_the_calibration_and_flags_the_column(tmp_path):
    method = build_method("direct", FakeLLM(default="Paris"))
    judge, rewriter = FakeLLM(default='{"verdict": "Yes"}'), FakeLLM(default="Paris")
    metrics = run_qa(method, QUESTIONS, tmp_path / "run", {"method": "direct", "dataset": "d.jsonl"},
                     judge_llm=judge, reanswer_llm=rewriter, reanswer_prompt="answer_type", calibrate=4, self_judged=True)
    asked = {c.last_user.split("Question: ")[1].split("\n")[0]: c.last_user for c in rewriter.calls}
    assert "the answers are 67% a name or title, 33% a short phrase." in asked["Where was Marie Curie born?"]
    assert "the answers are 50% a name or title, 25% a short phrase, 25% yes/no" in asked[QUESTIONS[3].text]
    cal = metrics["judge_calibration"]
    assert cal["limit"] == 4 and cal["reliable"] is False and cal["self_judged"] is True
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["judge_calibration"] == cal
    table = (tmp_path / "run" / "metrics.md").read_text()
    assert "unreliable: calibration" in table and "(self;" in table
    asked = len(judge.calls)
    run_qa(method, QUESTIONS, tmp_path / "run", {"method": "direct", "dataset": "d.jsonl"}, judge_llm=judge,
           reanswer_llm=FakeLLM(default="Paris"), reanswer_prompt="answer_type", calibrate=4, self_judged=True)
    assert len(judge.calls) == asked  # a finished run's calibration is kept, not asked again


def test_paper_table_prints_intervals_and_flags_the_judge(tmp_path):
    method = build_method("direct", FakeLLM(responses=["Warsaw", "Paris", "Marie Curie", "no"]))
    run_qa(method, QUESTIONS, tmp_path / "direct", {"method": "direct", "dataset": "d.jsonl"},
           judge_llm=FakeLLM(default='{"verdict": "Yes"}'), calibrate=4, self_judged=True)
    script = benchmark_script("paper_table")
    row = script.main([str(tmp_path / "direct")]).splitlines()[-1]
    # EM: 2 of 4 right ("Warsaw", "Marie Curie"). The Yes-saying judge is flagged, not printed bare: right on
    # the 4 gold answers only, of 4 + 4 other questions' golds + 2 wrong predictions ("Paris", "no") = 0.40
    assert row.startswith("| `direct` | 4 | 0.500 [0.000, 1.000] |") and "(self; unreliable: calibration 0.40)" in row
    # a second run, labelled as another method, on the first 3 questions: paired rows over those 3 only
    other = build_method("direct", FakeLLM(responses=["Warsaw", "Paris", "nobody"]))
    run_qa(other, QUESTIONS[:3], tmp_path / "other", {"method": "naive_rag", "dataset": "d.jsonl"})
    runs = [str(tmp_path / "direct"), str(tmp_path / "other")]
    paired = script.main([*runs, "--minus", "naive_rag"]).splitlines()[-1]
    assert paired.startswith("| `direct` - `naive_rag` | 3 | 0.667 | 0.333 | +0.333 [")  # "Marie Curie" vs "nobody"
    with pytest.raises(SystemExit, match="no run of method"):
        script.main([*runs, "--pair", "dualrag:ircot"])


def test_a_run_seeded_with_an_earlier_runs_judge_replies_asks_its_judge_nothing_again(tmp_path, monkeypatch, capsys):
    a, b = tmp_path / "a", tmp_path / "b"

    def run(folder, judge):
        claim_dir(folder, "qa-run")  # as tandem eval qa does, before its cache opens
        method = build_method("direct", CachedLLM(FakeLLM(default="Paris"), folder / "llm-cache.sqlite"))
        run_qa(method, QUESTIONS, folder, {"method": "direct", "dataset": "d.jsonl"},
               judge_llm=CachedLLM(judge, folder / "llm-cache.sqlite"), calibrate=4)

    run(a, FakeLLM(default=_judge_by_truth))
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "llm-cache.sqlite").write_text("not a database")
    monkeypatch.setattr(sys, "argv", ["seed_judge.py", str(b), str(damaged), str(a), str(tmp_path / "no-run")])
    benchmark_script("seed_judge").main()
    assert f"{damaged / 'llm-cache.sqlite'} or " in capsys.readouterr().err  # named, skipped, the rest seeded
    answers = FakeLLM(default="Paris")  # the method's own replies were not copied
    build_method("direct", CachedLLM(answers, b / "llm-cache.sqlite")).answer(QUESTIONS[0])
    assert len(answers.calls) == 1
    judge = FakeLLM(default=_judge_by_truth)
    run(b, judge)
    assert judge.calls == []  # the calibration's pairs and the same answers' verdicts: all read
    assert json.loads((b / "metrics.json").read_text())["judge_calibration"]["accuracy"] == 1.0


def test_a_folder_from_before_reanswer_prompt_resumes_under_the_brief_prompt(tmp_path):
    method = build_method("direct", FakeLLM(default="Warsaw"))
    run_qa(method, QUESTIONS[:1], tmp_path / "run", {"method": "direct", "dataset": "d.jsonl"})  # no reanswer_prompt
    run_qa(method, QUESTIONS[:2], tmp_path / "run", {"method": "direct", "dataset": "d.jsonl", "reanswer_prompt": "brief"})
    with pytest.raises(ConfigError, match="reanswer_prompt"):
        run_qa(method, QUESTIONS, tmp_path / "run", {"method": "direct", "dataset": "d.jsonl",
                                                      "reanswer_prompt": "answer_type"})
