"""Property-based fuzzing (hypothesis): every loader and every HTTP request body, fed random bytes,
wrong JSON shapes, huge fields and deep nesting, answers with a clear error (a ``TandemError``: exit 2
on the command line, HTTP 4xx from the server) or a result, never an unexpected exception, an
"internal error" or a 5xx. Examples per property are bounded to keep the file to seconds (``FUZZ``).
Each case found so far is fixed where it was: deep nesting (RecursionError), a `.gz` that is not
gzip and a lone surrogate escape (``"\\ud800"``: valid JSON, not UTF-8) in the JSON readers
(:mod:`tandem.io`), a title that is a list or an object in a corpus record."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tandem.corpus.loaders import iter_corpus, load_corpus, load_dataset
from tandem.errors import TandemError
from tandem.index import build_index
from tandem.io import read_json_records, read_jsonl
from tandem.types import Document

#: Examples per property: 50 by default (seconds); ``TANDEM_FUZZ_EXAMPLES=1000`` for a longer search.
FUZZ = settings(max_examples=int(os.environ.get("TANDEM_FUZZ_EXAMPLES", "50")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])

# JSON values of any shape, some deeply nested or with huge strings
scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
           | st.sampled_from(["\ud800", "a\udfffb", float("inf"), 10**40, "\x00"]))  # lone surrogates: JSON, not UTF-8
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                           max_leaves=12)
FIELDS = ["id", "title", "text", "contents", "question", "answer", "answers", "golden_answers", "context",
          "supporting_facts", "paragraphs", "_id", "docs", "metadata"]
records = st.dictionaries(st.sampled_from(FIELDS), json_values | st.text(min_size=0, max_size=50), max_size=6)
nested = st.integers(min_value=1, max_value=200_000).map(lambda depth: "[" * depth + "]" * depth)
huge = st.integers(min_value=100_000, max_value=3_000_000).map(lambda n: json.dumps({"id": "a", "title": "t", "text": "w " * (n // 2)}))


def jsonl_bytes() -> st.SearchStrategy[bytes]:
    line = (records.map(json.dumps) | json_values.map(json.dumps) | nested | st.text(max_size=40)
            | st.binary(max_size=40).map(lambda b: b.decode("latin-1")))
    return (st.lists(line, min_size=0, max_size=6).map(lambda lines: "\n".join(lines).encode("utf-8", "surrogatepass"))
            | st.binary(max_size=400) | huge.map(str.encode))


def load_every_way(path: Path) -> None:
    """Each loader over ``path``: a result or a TandemError, nothing else."""
    for load in (lambda: list(read_jsonl(path)), lambda: list(read_json_records(path)), lambda: load_corpus(path),
                 lambda: list(iter_corpus(path)), lambda: load_dataset(path), lambda: load_corpus(path, skip_bad=True)):
        try:
            load()
        except TandemError as exc:
            assert str(exc), "an error without a message"


@FUZZ
@given(data=jsonl_bytes(), suffix=st.sampled_from([".jsonl", ".json", ".jsonl.gz", ".parquet", ".txt"]))
@example(data=b"[" * 100_000 + b"]" * 100_000, suffix=".jsonl")  # the cases found so far, always tried
@example(data=b"{}", suffix=".jsonl.gz")
@example(data=b'{"id": "a", "title": "\\ud800", "text": "x"}', suffix=".jsonl")
@example(data=b'[{"title": [["a", ["s"]]], "text": "a"}]', suffix=".json")
def test_loaders_answer_any_file_with_a_result_or_a_clear_error(tmp_path_factory, data, suffix):
    path = tmp_path_factory.mktemp("fuzz") / f"input{suffix}"
    path.write_bytes(data)
    load_every_way(path)


def table_bytes() -> st.SearchStrategy[bytes]:
    """CSV / TSV text of any shape: a header of known and odd names, rows of random cells (quotes, separators,
    newlines, NULs, lone surrogates), rows too short or too long, or random bytes."""
    cell = st.text(alphabet=st.sampled_from(list('ab ,;\t"\r\n\x00[]{}') + ["\ud800", "é"]), max_size=12)
    header = st.lists(st.sampled_from(FIELDS) | st.text(max_size=5), min_size=0, max_size=5)
    rows = st.lists(st.lists(cell, max_size=6), max_size=5)
    text = st.tuples(header, rows, st.sampled_from([",", "\t"])).map(
        lambda t: "\n".join(t[2].join(r) for r in [t[0], *t[1]]))
    return text.map(lambda s: s.encode("utf-8", "surrogatepass")) | st.binary(max_size=300)


@FUZZ
@given(data=table_bytes(), suffix=st.sampled_from([".csv", ".tsv", ".csv.gz"]))
@example(data=b'id,title,text\na,A,"never closed\n', suffix=".csv")
def test_a_table_of_any_shape_is_a_result_or_a_clear_error(tmp_path_factory, data, suffix):
    path = tmp_path_factory.mktemp("fuzz") / f"input{suffix}"
    path.write_bytes(data)
    load_every_way(path)


@FUZZ
@given(text=(json_values | records | st.lists(records, max_size=4)).map(json.dumps) | nested)
def test_a_json_file_of_any_shape_is_a_result_or_a_clear_error(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "input.json"
    path.write_text(text)
    load_every_way(path)


@FUZZ
@given(names=st.lists(st.sampled_from(["a.txt", "b.md", "c.txt", "sub/d.md"]), min_size=1, max_size=3, unique=True),
       contents=st.lists(st.binary(max_size=300), min_size=3, max_size=3))
def test_a_folder_of_any_files_is_a_result_or_a_clear_error(tmp_path_factory, names, contents):
    folder = tmp_path_factory.mktemp("fuzz") / "docs"
    for name, data in zip(names, contents, strict=False):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    load_every_way(folder)


@FUZZ
@given(data=jsonl_bytes())
def test_the_command_line_never_reaches_the_internal_error_path_on_user_files(tmp_path_factory, monkeypatch, capsys, data):
    """The grep of the issue: a user's file never makes the CLI print "internal error" or exit 1."""
    from tandem.cli import main

    folder = tmp_path_factory.mktemp("fuzz")
    path = folder / "input.jsonl"
    path.write_bytes(data)
    for argv in (["data", "inspect", str(path)], ["index", "--corpus", str(path), "--kind", "bm25", "--out", str(folder / "idx")]):
        monkeypatch.setattr(sys, "argv", ["tandem", *argv])
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code
        err = capsys.readouterr().err
        assert "internal error" not in err and "Traceback" not in err, err
        assert code in (0, 2), err
        assert not list(folder.glob(".idx.*")), "a refused input left a work or temp folder"


# -- HTTP request bodies ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def client(tmp_path_factory):
    from fastapi.testclient import TestClient

    from tandem.server.app import create_app
    from tandem.server.engine import Engine
    from tandem.testing.fake_llm import FakeLLM

    index = tmp_path_factory.mktemp("srv") / "idx"
    build_index([Document(f"d{i}", f"Title {i}", f"passage {i} about rivers and castles") for i in range(8)], index,
                kind="bm25")
    engine = Engine({"demo": index}, FakeLLM(default="Warsaw"), method="naive_rag", workers=2, max_queue=16)
    with TestClient(create_app(engine, max_body=1 << 20, max_question=2000), raise_server_exceptions=False) as test_client:
        yield test_client
    engine.close()


ENDPOINTS = ["/v1/ask", "/v1/retrieve", "/v1/chat/completions", "/v1/ask/stream", "/v1/indexes"]
bodies = (json_values.map(json.dumps) | records.map(json.dumps) | nested.map(lambda s: s[:400_000])
          | st.binary(max_size=300).map(lambda b: b.decode("latin-1"))
          | st.fixed_dictionaries({"question": st.text(max_size=3000) | json_values},
                                  optional={"method": st.text(max_size=12) | json_values, "index": json_values,
                                            "k": json_values, "settings": json_values, "llm": json_values}).map(json.dumps)
          | st.fixed_dictionaries({"messages": st.lists(st.fixed_dictionaries(
              {"role": st.sampled_from(["user", "system", "assistant", "x"]) | json_values,
               "content": st.text(max_size=200) | json_values}), max_size=3) | json_values},
              optional={"model": json_values, "stream": json_values}).map(json.dumps))


@FUZZ
@example(endpoint="/v1/ask", body='"\\ud800"', content_type="application/json")  # found so far, always tried
@example(endpoint="/v1/ask", body='{"question": "\\ud800"}', content_type="application/json")
@example(endpoint="/v1/chat/completions", body="Infinity", content_type="application/json")
@given(endpoint=st.sampled_from(ENDPOINTS), body=bodies,
       content_type=st.sampled_from(["application/json", "text/plain", "multipart/form-data; boundary=x"]))
def test_any_request_body_is_a_4xx_or_an_answer_never_a_5xx(client, endpoint, body, content_type):
    reply = client.post(endpoint, content=body.encode("utf-8", "surrogatepass"), headers={"Content-Type": content_type})
    assert reply.status_code < 500, (endpoint, body[:200], reply.status_code, reply.text[:300])
    if reply.status_code >= 400:
        assert reply.text, "an error without a message"
