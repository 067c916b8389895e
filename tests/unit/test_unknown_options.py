"""An unknown or bad option for any registered component exits 2 naming the valid ones (one case per kind)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tandem.index import build_index


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    from tandem.types import Document

    folder = tmp_path_factory.mktemp("opts") / "idx"
    docs = [Document("d1", "Marie Curie", "Marie Curie was born in Warsaw."),
            Document("d2", "Warsaw", "Warsaw is the capital of Poland.")]
    build_index(docs, folder, kind="bm25")
    return folder


def tandem(*args: str) -> tuple[int, str]:
    run = subprocess.run([sys.executable, "-m", "tandem.cli", *args], capture_output=True, text=True, timeout=300)
    return run.returncode, " ".join(run.stderr.split())  # the console wraps long lines


@pytest.mark.parametrize(("kind", "args", "said"), [
    ("method", ["ask", "--method", "ircot", "--llm", "fake:x", "--set", "max_stepz=2", "Q?"],
     "unknown setting 'max_stepz'; valid settings: ['candidates', 'first_stage', 'k', 'max_steps'"),
    ("reranker", ["ask", "--method", "naive_rag", "--llm", "fake:x", "--set", "reranker=colbert", "Q?"],
     "Input should be 'bi_encoder', 'cross_encoder' or 'none'"),
    ("retriever", ["retrieve", "--retriever", "bm25", "--retriever-opt", "depht=5", "Q?"],
     "bm25 retriever settings: unknown setting 'depht'; valid settings: []"),
    ("LLM backend", ["ask", "--method", "direct", "--llm", "fake:x", "--llm-opt", "timeoutt=3", "Q?"],
     "unknown --llm-opt 'timeoutt' for the 'fake' backend"),
    ("LLM", ["ask", "--method", "direct", "--llm", "gpt4", "Q?"], "unknown LLM backend 'gpt4'"),
])
def test_unknown_options_name_the_valid_ones(index_dir, kind, args, said):
    if args[0] in ("ask", "retrieve") and "--index" not in args:
        args = [args[0], "--index", str(index_dir), *args[1:]]
    code, err = tandem(*args)
    assert code == 2 and said in err, (kind, err)


def test_store_and_index_kind_options(tmp_path, index_dir):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "a", "title": "A", "text": "Warsaw is in Poland."}\n')
    code, err = tandem("index", "--corpus", str(corpus), "--kind", "dense", "--store", "ivfpq", "--store-opt",
                       "nprob=4", "--out", str(tmp_path / "i1"))
    assert code == 2 and "ivfpq store settings: unknown setting 'nprob'; valid settings: ['nlist', 'nprobe'" in err
    code, err = tandem("index", "--corpus", str(corpus), "--kind", "sparse", "--out", str(tmp_path / "i2"))
    assert code == 2 and "unknown index kind 'sparse'; choose one of ['bm25', 'dense', 'hybrid']" in err
    assert not (tmp_path / "i1").exists() and not (tmp_path / "i2").exists()


def test_a_question_that_is_not_text_is_named_not_an_internal_error(tmp_path):
    """A command-line argument that is not UTF-8 decodes to lone surrogates, which no tokenizer takes."""
    from tandem.types import Document

    build_index([Document("d1", "Warsaw", "Warsaw is the capital of Poland.")], tmp_path / "idx", kind="dense")
    run = subprocess.run([sys.executable, "-m", "tandem.cli", "retrieve", "--index", str(tmp_path / "idx"),
                          b"caf\xe9".decode("utf-8", "surrogateescape")], capture_output=True, text=True, timeout=300,
                         errors="replace")
    said = " ".join(run.stderr.split())
    assert run.returncode == 2 and "the query is not valid text" in said and "internal error" not in said
