"""Every format in ../shared/data loads with the right gold ids; bad input gives clear errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from tests.conftest import shared

from tandem.corpus import load_corpus, load_dataset, load_folder, sniff_format
from tandem.errors import DataError
from tandem.types import doc_id_for


def _gold_titles(ds, q):
    by_id = {d.id: d for d in ds.passages}
    return sorted(by_id[g].title for g in q.gold_doc_ids)


def test_ircot_dev500_pool_and_gold():
    ds = load_dataset(shared("hotpotqa/dev500.jsonl"))
    assert ds.format == "ircot"
    assert len(ds.questions) == 500
    assert len(ds.passages) == 4858
    first = ds.questions[0]
    assert first.answers == ("Chief of Protocol",)
    assert _gold_titles(ds, first) == ["Kiss and Tell (1945 film)", "Shirley Temple"]
    ids = {d.id for d in ds.passages}
    assert all(len(q.gold_doc_ids) == 2 and set(q.gold_doc_ids) <= ids for q in ds.questions)


def test_hipporag_musique_maps_gold_onto_corpus_file():
    ds = load_dataset(shared("musique/hipporag_100.json"))
    assert ds.format == "hipporag"
    assert len(ds.questions) == 100 and len(ds.passages) == 1890
    raw = json.loads(shared("musique/hipporag_100.json").read_text())[0]
    want = sorted(p["title"] for p in raw["paragraphs"] if p["is_supporting"])
    assert _gold_titles(ds, ds.questions[0]) == want
    assert ds.questions[0].answers[0] == raw["answer"]
    ids = {d.id for d in ds.passages}
    assert all(q.gold_doc_ids and set(q.gold_doc_ids) <= ids for q in ds.questions)


def test_hotpotqa_original_supporting_facts():
    ds = load_dataset(shared("fixtures/hotpot_example.jsonl"))
    assert ds.format == "hotpotqa" and len(ds.questions) == 10
    q = ds.questions[0]
    assert q.answers == ("Major League Soccer",)
    assert _gold_titles(ds, q) == ["Donnie Smith", "Major League Soccer"]
    assert len(q.metadata["supporting_sentences"]) == 3


def test_2wiki_original_keeps_evidences():
    ds = load_dataset(shared("fixtures/wiki_example.jsonl"))
    assert ds.format == "2wiki"
    q = ds.questions[0]
    assert _gold_titles(ds, q) == ["Come with Me (Pure Imagination)", "Hold on Me (Grinspoon song)"]
    assert q.metadata["evidences"][0][1] == "publication date"


def test_musique_original_fixture():
    ds = load_dataset(shared("fixtures/musique_example.jsonl"))
    assert ds.format == "musique" and len(ds.questions) == 10
    raw = json.loads(shared("fixtures/musique_example.jsonl").read_text().splitlines()[0])
    assert _gold_titles(ds, ds.questions[0]) == sorted(p["title"] for p in raw["paragraphs"] if p["is_supporting"])


def test_nq_oracle_gz():
    ds = load_dataset(shared("nq/nq-open-oracle.jsonl.gz"))
    assert ds.format == "nq_oracle" and len(ds.questions) == 2655
    q = ds.questions[0]
    assert q.text == "who got the first nobel prize in physics"
    assert _gold_titles(ds, q) == ["List of Nobel laureates in Physics"]


def test_bamboogle_simple_qa():
    ds = load_dataset(shared("bamboogle/bamboogle.jsonl"))
    assert ds.format == "simple_qa" and len(ds.questions) == 125
    assert ds.questions[0].answers == ("james madison",)
    assert not ds.passages


def test_flashrag_dataset_and_corpus(tmp_path: Path):
    data = tmp_path / "test.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": "Who?", "golden_answers": ["A", "B"], "metadata": {"type": "x"}}) + "\n")
    ds = load_dataset(data)
    assert ds.format == "flashrag" and ds.questions[0].answers == ("A", "B")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "7", "contents": '"Warsaw"\nWarsaw is the capital of Poland.'}) + "\n")
    docs = load_corpus(corpus)
    assert docs[0].id == "7" and docs[0].title == "Warsaw" and docs[0].text == "Warsaw is the capital of Poland."


def test_plain_corpus_and_content_ids(tmp_path: Path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        json.dumps({"id": "a", "title": "T", "text": "x y"}) + "\n" + json.dumps({"title": "U", "text": "z"}) + "\n"
    )
    docs = load_corpus(corpus)
    assert [d.id for d in docs] == ["a", doc_id_for("U", "z")]


def test_folder_chunking(tmp_path: Path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "long.md").write_text("# Long doc\n\n" + " ".join(f"w{i}" for i in range(450)))
    (tmp_path / "short.txt").write_text("just a few words")
    docs = load_folder(tmp_path, max_tokens=200, overlap=40)
    assert sniff_format(tmp_path) == "folder"
    longs = [d for d in docs if d.metadata["source"] == "sub/long.md"]
    assert [d.id for d in longs] == ["sub/long.md#0", "sub/long.md#1", "sub/long.md#2"]
    assert longs[0].title == "Long doc"
    assert all(len(d.text.split()) <= 200 for d in longs)
    # consecutive chunks share exactly the overlap
    assert longs[0].text.split()[-40:] == longs[1].text.split()[:40]
    assert longs[-1].text.split()[-1] == "w449"


# --- bad input -------------------------------------------------------------------------------

def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_malformed_json_line_names_file_and_line(tmp_path: Path):
    path = _write(tmp_path / "c.jsonl", ['{"id": "1", "text": "a"}', '{"id": "2", "text": ', '{"id": "3", "text": "c"}'])
    with pytest.raises(DataError, match=r"c\.jsonl:2: malformed JSON"):
        load_corpus(path)


def test_malformed_line_skipped_and_counted(tmp_path: Path):
    path = _write(tmp_path / "q.jsonl", [
        '{"question": "a?", "answer": "x"}', "not json", '{"question": "b?", "answer": "y"}',
    ])
    ds = load_dataset(path, skip_bad=True)
    assert len(ds.questions) == 2 and ds.skipped == 1
    assert any("q.jsonl:2" in n for n in ds.notes)


def test_files_a_windows_editor_saved_with_a_byte_order_mark_and_crlf_read_as_without(tmp_path: Path):
    from tandem.config import read_config_file

    bom, records = b"\xef\xbb\xbf", [{"id": "a", "title": "Alpha", "text": "Alpha is in Beta."},
                                       {"id": "b", "title": "Beta", "text": "Beta is a country."}]
    as_jsonl = bom + b"".join(json.dumps(r).encode() + b"\r\n" for r in records)
    files = {"c.jsonl": as_jsonl, "c.json": bom + json.dumps(records).encode(),
             "map.json": bom + json.dumps({r["title"]: r["text"] for r in records}, indent=1).encode(),
             "one.json": bom + json.dumps(records[0], indent=1).encode()}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        docs = load_corpus(tmp_path / name)
        assert [d.text for d in docs] == [r["text"] for r in records][:len(docs)] and docs, name
    (tmp_path / "q.jsonl").write_bytes(bom + b'{"question": "Where is Alpha?", "answer": "Beta"}\r\n')
    assert load_dataset(tmp_path / "q.jsonl").questions[0].answers == ("Beta",)
    (tmp_path / "run.yaml").write_bytes(bom + b"method: naive_rag\r\n")
    assert read_config_file(tmp_path / "run.yaml") == {"method": "naive_rag"}
    (tmp_path / "late.jsonl").write_bytes(as_jsonl + bom + b'{"id": "c", "text": "x"}\n')  # only line 1 may hold one
    with pytest.raises(DataError, match=r"late\.jsonl:3: malformed JSON"):
        load_corpus(tmp_path / "late.jsonl")


def test_csv_and_tsv_tables_read_as_records_and_bad_rows_name_their_line(tmp_path: Path):
    corpus = tmp_path / "c.csv"
    corpus.write_bytes(b'id,title,text\r\na,Alpha,"Alpha is in Beta, a country."\r\n\r\n'
                       b',Beta,"one line\r\nand a second, quoted"\r\n')
    docs = load_corpus(corpus)
    assert [(d.id, d.title) for d in docs] == [("a", "Alpha"), (doc_id_for("Beta", "one line\r\nand a second, quoted"), "Beta")]
    assert docs[0].text == "Alpha is in Beta, a country."
    (tmp_path / "c.tsv.gz").write_bytes(gzip.compress(b"id\ttitle\ttext\nb\tBeta\tBeta, a country.\n"))
    assert [d.text for d in load_corpus(tmp_path / "c.tsv.gz")] == ["Beta, a country."]
    qa = tmp_path / "q.csv"
    qa.write_text('question,answers\nWhere is Alpha?,"[""Beta"", ""the Beta""]"\nWhat is Beta?,a country\n')
    ds = load_dataset(qa)
    assert ds.format == "simple_qa" and [q.answers for q in ds.questions] == [("Beta", "the Beta"), ("a country",)]
    bad = {"cells.csv": (b"id,title,text\na,A,x\nb,B,y,z\n", r"cells\.csv:3: 4 cells, the header names 3"),
           "quote.csv": (b'id,title,text\na,A,x\nb,B,"never closed\nc,C,z\n', r"quote\.csv:3: malformed CSV"),
           "header.csv": (b"id,text,text\na,x,y\n", r"header\.csv:1: the header line needs a distinct name"),
           "bytes.csv": (b"id,title,text\na,A,x\nb,B,caf\xe9\n", r"bytes\.csv:3: not valid UTF-8"),
           "allbad.csv": (b"id,title,text\na,A\n", r"no readable record \(the first bad one: .*allbad\.csv:2: 2 cells")}
    for name, (data, message) in bad.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(DataError, match=message):
            load_corpus(tmp_path / name)
    assert [d.id for d in load_corpus(tmp_path / "cells.csv", skip_bad=True)] == ["a"]
    (tmp_path / "sheet.xlsx").write_bytes(b"PK\x03\x04\x14\x00 a spreadsheet \xff")
    with pytest.raises(DataError, match=r"sheet\.xlsx: not a kind of file tandem reads \(\.xlsx\).*save a spreadsheet as CSV"):
        load_corpus(tmp_path / "sheet.xlsx")


def test_squad_and_triviaqa_answer_layouts_give_their_texts_and_squads_context_is_the_gold_passage(tmp_path: Path):
    squad = {"id": "5733be", "title": "Alpha", "context": "Alpha is a city in Beta.", "question": "Where is Alpha?",
             "answers": {"text": ["Beta", "Beta"], "answer_start": [19, 19]}}
    trivia = {"question": "Where is Alpha?", "answer": {"value": "Beta", "aliases": ["Beta", "the Beta"]}}
    _write(tmp_path / "squad.jsonl", [json.dumps(squad)])
    _write(tmp_path / "trivia.jsonl", [json.dumps(trivia)])
    ds = load_dataset(tmp_path / "squad.jsonl")
    (q,), (passage,) = ds.questions, ds.passages
    assert q.answers == ("Beta",) and q.gold_doc_ids == (passage.id,) and passage.title == "Alpha"
    assert load_dataset(tmp_path / "trivia.jsonl").questions[0].answers == ("Beta", "the Beta")
    _write(tmp_path / "strategy.jsonl", [json.dumps({"qid": "s1", "question": "Is Alpha in Beta?", "answer": True}),
                                         json.dumps({"qid": "s2", "question": "Is Beta in Alpha?", "answer": False})])
    strategy = load_dataset(tmp_path / "strategy.jsonl").questions
    assert [(q.id, q.answers) for q in strategy] == [("s1", ("yes",)), ("s2", ("no",))]  # StrategyQA's qid and booleans
    _write(tmp_path / "v2.jsonl", [json.dumps(squad), json.dumps({**squad, "id": "u1", "answers": {"text": [], "answer_start": []}})])
    assert any("1 of 2 questions have no gold answer (first: 'u1'" in note for note in load_dataset(tmp_path / "v2.jsonl").notes)
    _write(tmp_path / "odd.jsonl", [json.dumps({"question": "Q?", "answers": {"start": [1]}})])
    with pytest.raises(DataError, match=r"odd\.jsonl:1: .*field 'answers' is an object with keys \['start'\]"):
        load_dataset(tmp_path / "odd.jsonl")


def test_beir_and_langchain_passage_layouts_keep_their_ids_and_texts(tmp_path: Path):
    beir = [{"_id": "d1", "title": "Alpha", "text": "Alpha is in Beta.", "metadata": {}},
            {"_id": "d2", "title": "Beta", "text": "Beta is a country.", "metadata": {}}]
    _write(tmp_path / "corpus.jsonl", [json.dumps(r) for r in beir])
    assert [(d.id, d.text) for d in load_corpus(tmp_path / "corpus.jsonl")] == [("d1", "Alpha is in Beta."),
                                                                               ("d2", "Beta is a country.")]
    # one LangChain document, alone on one line: a record, not a map of two passages titled "id" and "page_content"
    _write(tmp_path / "one.jsonl", [json.dumps({"id": "7", "page_content": "Alpha is in Beta.", "metadata": {"p": 1}})])
    (doc,) = load_corpus(tmp_path / "one.jsonl")
    assert (doc.id, doc.title, doc.text, doc.metadata) == ("7", "", "Alpha is in Beta.", {"metadata": {"p": 1}})


def test_non_utf8_bytes(tmp_path: Path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"id": "1", "text": "ok"}\n{"id": "2", "text": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"c\.jsonl:2: not valid UTF-8"):
        load_corpus(path)


def test_empty_text(tmp_path: Path):
    path = _write(tmp_path / "c.jsonl", ['{"id": "1", "text": "ok"}', '{"id": "2", "title": "T", "text": "  "}'])
    with pytest.raises(DataError, match=r"c\.jsonl:2: .*empty text"):
        load_corpus(path)


def test_duplicate_ids(tmp_path: Path):
    path = _write(tmp_path / "c.jsonl", ['{"id": "1", "text": "a"}', '{"id": "1", "text": "b"}'])
    with pytest.raises(DataError, match=r"c\.jsonl:2: duplicate id '1'.*line 1"):
        load_corpus(path)
    qpath = _write(tmp_path / "q.jsonl", ['{"id": "q", "question": "a?", "answer": "x"}', '{"id": "q", "question": "b?", "answer": "y"}'])
    with pytest.raises(DataError, match=r"q\.jsonl:2: duplicate question id 'q'"):
        load_dataset(qpath)


def test_missing_required_field(tmp_path: Path):
    path = _write(tmp_path / "h.jsonl", [json.dumps({"_id": "1", "question": "q?", "context": [["T", ["s."]]], "supporting_facts": []})])
    with pytest.raises(DataError, match=r"h\.jsonl:1: bad hotpotqa record: missing required field 'answer'"):
        load_dataset(path)


def test_unknown_format(tmp_path: Path):
    path = _write(tmp_path / "x.jsonl", ['{"foo": 1}'])
    with pytest.raises(DataError, match="cannot tell the format"):
        load_dataset(path)


def test_gzip_jsonl_errors_keep_line(tmp_path: Path):
    path = tmp_path / "c.jsonl.gz"
    with gzip.open(path, "wt") as handle:
        handle.write('{"id": "1", "text": "a"}\n{bad\n')
    with pytest.raises(DataError, match=r"c\.jsonl\.gz:2"):
        load_corpus(path)


def test_chunking_a_long_paragraph_is_linear_and_keeps_every_word():
    from tandem.corpus.chunking import chunk_text

    words = [f"w{i}" for i in range(200_000)]  # one paragraph: cut mid-way many times
    chunks = chunk_text(" ".join(words), max_tokens=200, overlap=40)
    assert len(chunks) == 1250
    assert chunks[1].split()[:40] == chunks[0].split()[-40:]
    rebuilt = chunks[0].split() + [w for c in chunks[1:] for w in c.split()[40:]]
    assert rebuilt == words


def test_data_inspect_gives_a_slices_answer_types():
    from typer.testing import CliRunner

    from tandem.cli import app

    runner = CliRunner()
    path = str(shared("hotpotqa/dev500.jsonl"))
    bridge = runner.invoke(app, ["data", "inspect", path, "--limit", "250"])
    comparison = runner.invoke(app, ["data", "inspect", path, "--offset", "250", "--json"])
    assert bridge.exit_code == 0 and comparison.exit_code == 0
    assert "250 questions (0-249 of 500)" in bridge.output and "yes/no" not in bridge.output  # dev500 is sorted by type
    assert "32% yes/no" in json.loads(comparison.stdout)["answer_types"]
    beyond = runner.invoke(app, ["data", "inspect", path, "--offset", "500"])
    assert beyond.exit_code == 2 and "skips every question" in beyond.output
