"""``tandem train retriever``: options generated from its settings model, ``--config`` under them, ``--json``."""

from __future__ import annotations

import json

from tests.conftest import shared, tandem


def test_train_retriever_settings_are_checked_before_any_work(tmp_path):
    missing = tandem("train", "retriever", "--out", str(tmp_path / "m"))
    assert missing.returncode == 2 and "setting 'dataset': Field required" in missing.stderr
    bad = tandem("train", "retriever", "--out", str(tmp_path / "m"), "--dataset", "x.jsonl", "--epochs", "0")
    assert bad.returncode == 2 and "setting 'epochs': Input should be greater than or equal to 1" in bad.stderr
    (tmp_path / "spec.yaml").write_text("dataset: x.jsonl\nepoch: 3\n")
    typo = tandem("train", "retriever", "--out", str(tmp_path / "m"), "--config", str(tmp_path / "spec.yaml"))
    said = " ".join(typo.stderr.split())  # the console wraps long lines
    assert typo.returncode == 2 and "unknown setting 'epoch'; valid settings: ['alpha', 'backward_weight'" in said
    assert not (tmp_path / "m").exists()


def test_train_retriever_runs_from_a_config_file_with_options_on_top(tmp_path):
    data = shared("fixtures/hotpot_example.jsonl")
    (tmp_path / "spec.yaml").write_text(f"dataset: {data}\ntrain_questions: '0:4'\neval_questions: ''\n"
                                        "score: cosine\nmax_steps: 5\nbatch_size: 2\n")
    run = tandem("-q", "train", "retriever", "--out", str(tmp_path / "model"), "--config", str(tmp_path / "spec.yaml"),
                 "--max-steps", "1", "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["spec"]["max_steps"] == 1 and report["spec"]["batch_size"] == 2  # the option over the file
    assert report["train"]["steps"] == 1 and report["before"] is None
    assert (tmp_path / "model" / "eval.json").is_file()


def test_federate_simulate_options_are_the_run_specs_fields(tmp_path):
    """``--k`` and ``--answer-tokens`` set the nested model settings, ``--epochs`` the training ones, a config file
    goes under the options; a key the spec does not have stops with exit 2 naming the valid ones."""
    (tmp_path / "spec.yaml").write_text("eval_limit: 5\ntrain: {epochs: 3, lr_reader: 0.01}\nmodel: {top_k: 4}\n")
    run = tandem("federate", "simulate", "--out", str(tmp_path / "run"), "--config", str(tmp_path / "spec.yaml"),
                 "--bench", str(tmp_path / "no-bench"), "--k", "2", "--epochs", "1", "--mode", "local")
    assert run.returncode == 2 and "no-bench" in run.stderr
    spec = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (spec["model"]["top_k"], spec["train"]["epochs"], spec["train"]["lr_reader"], spec["eval_limit"]) == (2, 1, 0.01, 5)
    (tmp_path / "bad.yaml").write_text("roundz: 3\n")
    bad = tandem("federate", "simulate", "--out", str(tmp_path / "run2"), "--config", str(tmp_path / "bad.yaml"),
                 "--bench", "b")
    assert bad.returncode == 2 and "unknown setting 'roundz'" in " ".join(bad.stderr.split())
