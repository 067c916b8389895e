"""Faults with the user's files and folders (docs/reliability.md): folders that hold a user's own files, a
corrupt run, two processes on one folder, an interrupted index swap; each case checks the message and what
is left on disk."""

from __future__ import annotations

import os

import pytest
from tests.conftest import closed_port_url, dead_pid, shared, tandem

from tandem.compose import build_method
from tandem.errors import ConfigError, DataError
from tandem.eval.runner import PREDICTIONS, load_done, run_qa
from tandem.index import build_index, open_index
from tandem.outdir import MARKER, folder_lock
from tandem.testing.fake_llm import FakeLLM
from tandem.types import Question

QUESTIONS = [Question(f"q{i}", f"What is item {i}?", (f"item{i}",)) for i in range(8)]
CONFIG = {"method": "direct", "dataset": "items.jsonl", "llm": "fake"}


# -- user files ------------------------------------------------------------------------------------

def test_index_refuses_a_users_folder_before_any_work(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "manifest.json").write_text('{"my": "manifest"}')
    (mine / "notes.txt").write_text("keep me")
    res = tandem("index", "--corpus", "examples/demo_corpus", "--kind", "bm25", "--out", str(mine))
    assert res.returncode == 2
    assert "was not made by tandem" in res.stderr and "notes.txt" in res.stderr
    assert "passages" not in res.stderr  # refused before the corpus was even read
    assert sorted(p.name for p in mine.iterdir()) == ["manifest.json", "notes.txt"]
    assert (mine / "notes.txt").read_text() == "keep me"


def test_index_never_deletes_a_file_added_to_an_index_folder(tmp_path, small_docs):
    build_index(small_docs, tmp_path / "idx", kind="bm25")
    (tmp_path / "idx" / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="did not write \\(notes.txt\\)"):
        build_index(small_docs[:3], tmp_path / "idx", kind="bm25")
    assert (tmp_path / "idx" / "notes.txt").read_text() == "keep me"
    assert open_index(tmp_path / "idx").manifest.doc_count == 5


def test_an_index_from_before_folder_markers_is_still_replaced(tmp_path, small_docs):
    build_index(small_docs, tmp_path / "idx", kind="bm25")
    (tmp_path / "idx" / MARKER).unlink()  # as built by an older tandem
    build_index(small_docs[:2], tmp_path / "idx", kind="bm25")
    assert open_index(tmp_path / "idx").manifest.doc_count == 2 and (tmp_path / "idx" / MARKER).exists()


def test_ask_against_a_dead_server_is_one_line_and_exit_1():
    res = tandem("ask", "--method", "direct", "--llm", f"openai:m@{closed_port_url()}", "--llm-opt", "backoff_base=0.01",
                 "What?")
    assert res.returncode == 1 and "cannot connect" in res.stderr and "Traceback" not in res.stderr


def test_eval_retrieval_refuses_a_folder_with_a_users_config(tmp_path, small_docs):
    build_index(small_docs, tmp_path / "idx", kind="bm25")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text('{"mine": true}')
    res = tandem("eval", "retrieval", "--dataset", str(shared("fixtures/hotpot_example.jsonl")), "--index",
                 str(tmp_path / "idx"), "--any-corpus", "--out", str(run))
    assert res.returncode == 2 and "was not made by tandem" in res.stderr
    assert sorted(p.name for p in run.iterdir()) == ["config.json"] and (run / "config.json").read_text() == '{"mine": true}'


def test_eval_qa_refuses_a_users_predictions_file_and_adds_nothing(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / PREDICTIONS).write_text('{"id": "x"}\nmy own notes, not JSON\n')
    res = tandem("eval", "qa", "--method", "direct", "--dataset", str(shared("fixtures/hotpot_example.jsonl")),
                 "--llm", "fake:x", "--out", str(run))
    assert res.returncode == 2 and "was not made by tandem" in res.stderr
    assert sorted(p.name for p in run.iterdir()) == [PREDICTIONS]  # no llm-cache.sqlite either
    assert "my own notes" in (run / PREDICTIONS).read_text()


def test_out_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "file.txt"
    target.write_text("mine")
    res = tandem("index", "--corpus", "examples/demo_corpus", "--kind", "bm25", "--out", str(target))
    assert res.returncode == 2 and "is a file" in res.stderr and target.read_text() == "mine"


def test_a_corrupt_middle_line_in_a_run_is_named_and_nothing_deleted(tmp_path):
    run_qa(build_method("direct", FakeLLM(default="x")), QUESTIONS[:2], tmp_path, CONFIG)
    path = tmp_path / PREDICTIONS
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "garbage\n" + lines[1])
    with pytest.raises(DataError, match=f"{PREDICTIONS}:2: not a prediction record"):
        load_done(path)
    assert "garbage" in path.read_text()

# -- two processes on one folder --------------------------------------------------------------------

def test_a_second_process_on_a_locked_run_folder_gets_a_clear_error(tmp_path):
    run = tmp_path / "run"
    with folder_lock(run):
        res = tandem("eval", "qa", "--method", "direct", "--dataset", str(shared("fixtures/hotpot_example.jsonl")),
                     "--llm", "fake:x", "--out", str(run))
    assert res.returncode == 2
    assert f"in use by another tandem process (pid {os.getpid()})" in res.stderr
    assert not run.exists()
    res = tandem("eval", "qa", "--method", "direct", "--dataset", str(shared("fixtures/hotpot_example.jsonl")),
                 "--llm", "fake:x", "--out", str(run))
    assert res.returncode == 0, res.stderr
    assert len(load_done(run / PREDICTIONS)) == 10 and (run / MARKER).exists()
    assert not (tmp_path / ".run.lock").exists()  # released and removed

# -- interrupted swap -----------------------------------------------------------------------------

def test_a_swap_cut_between_its_renames_is_rolled_back_on_open(tmp_path, small_docs):
    build_index(small_docs, tmp_path / "idx", kind="bm25")
    os.replace(tmp_path / "idx", tmp_path / f".idx.old-{dead_pid()}")  # crashed after the first rename
    assert open_index(tmp_path / "idx").manifest.doc_count == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_a_finished_swap_leaves_no_old_copy_after_the_next_build(tmp_path, small_docs):
    build_index(small_docs, tmp_path / "idx", kind="bm25")
    stale = tmp_path / f".idx.old-{dead_pid()}"
    stale.mkdir()
    (tmp_path / f".idx.building-{dead_pid()}").mkdir()
    build_index(small_docs[:2], tmp_path / "idx", kind="bm25")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]
    assert open_index(tmp_path / "idx").manifest.doc_count == 2
