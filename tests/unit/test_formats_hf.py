"""The field's data layouts: Hugging Face HotpotQA / 2WikiMultihopQA / MuSiQue records (JSONL, Parquet,
a save_to_disk folder, a dataset by name from the offline cache) and title -> text corpus maps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import shared

from tandem.corpus import load_corpus, load_dataset, sniff_format
from tandem.errors import DataError
from tandem.types import doc_id_for

HOTPOT_HF = {
    "id": "5a8b57f25542995d1e6f1371",
    "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
    "answer": "yes",
    "type": "comparison",
    "level": "hard",
    "supporting_facts": {"title": ["Scott Derrickson", "Ed Wood"], "sent_id": [0, 0]},
    "context": {
        "title": ["Ed Wood (film)", "Scott Derrickson", "Ed Wood"],
        "sentences": [
            ["Ed Wood is a 1994 American biographical film.", " It was directed by Tim Burton."],
            ["Scott Derrickson (born July 16, 1966) is an American director.", " He lives in Los Angeles."],
            ["Edward Davis Wood Jr. was an American filmmaker.", " He made low-budget films."],
        ],
    },
}


def _to_hf_layout(rec: dict) -> dict:
    """An original-release HotpotQA/2Wiki record in the Hugging Face column layout."""
    out = {k: v for k, v in rec.items() if k not in ("_id", "context", "supporting_facts", "evidences")}
    out["id"] = rec["_id"]
    out["context"] = {"title": [t for t, _ in rec["context"]], "sentences": [s for _, s in rec["context"]]}
    out["supporting_facts"] = {"title": [t for t, _ in rec["supporting_facts"]],
                               "sent_id": [i for _, i in rec["supporting_facts"]]}
    if "evidences" in rec:
        out["evidences"] = {"fact": [e[0] for e in rec["evidences"]], "relation": [e[1] for e in rec["evidences"]],
                            "entity": [e[2] for e in rec["evidences"]]}
    return out


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _parquet(path: Path, records: list[dict]) -> Path:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(records), path)
    return path


def _titles(ds, ids) -> list[str]:
    by_id = {d.id: d for d in ds.passages}
    return sorted(by_id[i].title for i in ids)


def test_hotpotqa_hf_record(tmp_path: Path):
    ds = load_dataset(_jsonl(tmp_path / "hotpot.jsonl", [HOTPOT_HF]))
    assert ds.format == "hotpotqa" and len(ds.questions) == 1 and len(ds.passages) == 3
    q = ds.questions[0]
    assert q.id == HOTPOT_HF["id"] and q.answers == ("yes",)
    assert _titles(ds, q.gold_doc_ids) == ["Ed Wood", "Scott Derrickson"]
    assert q.metadata["supporting_sentences"] == ["Scott Derrickson (born July 16, 1966) is an American director.",
                                                  "Edward Davis Wood Jr. was an American filmmaker."]
    assert q.metadata["type"] == "comparison"
    # the passage text joins the stripped sentences, so its id is the one the original layout gives
    text = "Ed Wood is a 1994 American biographical film. It was directed by Tim Burton."
    assert doc_id_for("Ed Wood (film)", text) in {d.id for d in ds.passages}


def test_hotpotqa_fixture_parquet_round_trip_matches_original(tmp_path: Path):
    """The shared HotpotQA fixture, converted to the HF layout and written as Parquet, loads exactly as
    the original release does: same questions, answers, gold ids and passage pool."""
    raw = [json.loads(line) for line in shared("fixtures/hotpot_example.jsonl").read_text().splitlines() if line.strip()]
    original = load_dataset(shared("fixtures/hotpot_example.jsonl"))
    path = _parquet(tmp_path / "validation-00000-of-00001.parquet", [_to_hf_layout(r) for r in raw])
    assert sniff_format(path) == "hotpotqa"
    hf = load_dataset(path)
    assert [(q.id, q.text, q.answers, q.gold_doc_ids) for q in hf.questions] == \
        [(q.id, q.text, q.answers, q.gold_doc_ids) for q in original.questions]
    assert [d.id for d in hf.passages] == [d.id for d in original.passages]


def test_2wiki_hf_record_keeps_evidences_and_type(tmp_path: Path):
    raw = json.loads(shared("fixtures/wiki_example.jsonl").read_text().splitlines()[0])
    rec = _to_hf_layout(raw)
    rec["context"] = {"title": rec["context"]["title"], "content": rec["context"]["sentences"]}  # the other naming
    ds = load_dataset(_jsonl(tmp_path / "2wiki.jsonl", [rec]))
    original = load_dataset(shared("fixtures/wiki_example.jsonl"))
    assert ds.format == "2wiki"
    q, want = ds.questions[0], original.questions[0]
    assert q.gold_doc_ids == want.gold_doc_ids and q.answers == want.answers
    assert q.metadata["evidences"] == want.metadata["evidences"] == [list(e) for e in raw["evidences"]]
    assert q.metadata["type"] == raw["type"]


def test_2wiki_context_as_list_pairs_with_dict_facts(tmp_path: Path):
    rec = {"_id": "w1", "type": "compositional", "question": "Who?", "answer": "A",
           "context": [["T1", ["a b.", "c d."]], ["T2", ["e f."]]],
           "supporting_facts": {"title": ["T2"], "sent_id": [0]},
           "evidences": [["T2", "director", "A"]]}
    ds = load_dataset(_jsonl(tmp_path / "w.jsonl", [rec]))
    assert ds.format == "2wiki" and _titles(ds, ds.questions[0].gold_doc_ids) == ["T2"]
    forced = load_dataset(tmp_path / "w.jsonl", format="hotpotqa")  # the format name is settable
    assert forced.format == "hotpotqa" and forced.questions[0].gold_doc_ids == ds.questions[0].gold_doc_ids


MUSIQUE_HF = {
    "id": "2hop__1_2",
    "paragraphs": [
        {"idx": 0, "title": "Lyon", "paragraph_text": "Lyon is a city in France.", "is_supporting": False},
        {"idx": 1, "title": "Paul Bocuse", "paragraph_text": "Paul Bocuse was a chef born near Lyon.", "is_supporting": True},
        {"idx": 2, "title": "France", "paragraph_text": "France's capital is Paris.", "is_supporting": True},
    ],
    "question": "What is the capital of the country where Paul Bocuse was born?",
    "question_decomposition": [
        {"id": 1, "question": "Where was Paul Bocuse born?", "answer": "France", "paragraph_support_idx": 1},
        {"id": 2, "question": "What is the capital of #1?", "answer": "Paris", "paragraph_support_idx": 2},
    ],
    "answer": "Paris",
    "answer_aliases": ["City of Light"],
    "answerable": True,
}


def _columns(rows: list[dict]) -> dict[str, list]:
    return {k: [r[k] for r in rows] for k in rows[0]}


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_musique_hf_record(tmp_path: Path, layout: str):
    rec = dict(MUSIQUE_HF)
    if layout == "columns":  # a datasets Sequence of structs stores a dict of lists
        rec["paragraphs"] = _columns(MUSIQUE_HF["paragraphs"])
        rec["question_decomposition"] = _columns(MUSIQUE_HF["question_decomposition"])
    unanswerable = {**rec, "id": "2hop__3_4", "answerable": False, "answer_aliases": []}
    ds = load_dataset(_parquet(tmp_path / "musique.parquet", [rec, unanswerable]))
    assert ds.format == "musique" and len(ds.questions) == 2 and len(ds.passages) == 3
    q = ds.questions[0]
    assert q.answers == ("Paris", "City of Light")
    assert _titles(ds, q.gold_doc_ids) == ["France", "Paul Bocuse"]
    assert [s["answer"] for s in q.metadata["decomposition"]] == ["France", "Paris"]
    assert ds.questions[1].metadata["answerable"] is False


# --- corpora as one JSON object: title -> text or title -> sentences -------------------------------

def test_title_to_sentences_corpus_and_questions_beside_it(tmp_path: Path):
    """HippoRAG v1 layout: ``X.json`` questions with ``X_corpus.json`` mapping title -> sentences beside
    it; the pool is the corpus and gold ids land on its passages."""
    raw = [json.loads(line) for line in shared("fixtures/hotpot_example.jsonl").read_text().splitlines() if line.strip()][:3]
    (tmp_path / "hotpot.json").write_text(json.dumps(raw, indent=2), encoding="utf-8")
    corpus = {title: sentences for r in raw for title, sentences in r["context"]}
    (tmp_path / "hotpot_corpus.json").write_text(json.dumps(corpus, indent=2), encoding="utf-8")
    docs = load_corpus(tmp_path / "hotpot_corpus.json", max_tokens=None)
    assert sniff_format(tmp_path / "hotpot_corpus.json") == "corpus"
    assert [d.title for d in docs] == list(corpus)
    ds = load_dataset(tmp_path / "hotpot.json")
    assert any("passage pool from" in n and "hotpot_corpus.json" in n for n in ds.notes)
    assert not any("not found" in n for n in ds.notes)
    assert {d.id for d in ds.passages} == {d.id for d in docs}
    gold = {t for r in raw for t, _ in r["supporting_facts"]}
    assert {d.title for q in ds.questions for d in ds.passages if d.id in q.gold_doc_ids} == gold


@pytest.mark.parametrize("indent", [None, 2])
def test_title_to_text_corpus(tmp_path: Path, indent):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"Warsaw": "Warsaw is the capital of Poland.", "Paris": ["Paris is in France.", "It is big."]},
                               indent=indent), encoding="utf-8")
    docs = load_corpus(path)
    assert [(d.title, d.text) for d in docs] == [("Warsaw", "Warsaw is the capital of Poland."),
                                                 ("Paris", "Paris is in France. It is big.")]
    assert docs[0].id == doc_id_for("Warsaw", "Warsaw is the capital of Poland.")


def test_single_record_jsonl_is_still_a_record(tmp_path: Path):
    path = _jsonl(tmp_path / "one.jsonl", [{"question": "Who?", "answer": "me"}])
    assert load_dataset(path).questions[0].answers == ("me",)


# --- malformed input names file and place ---------------------------------------------------------

def test_bad_hf_context_names_file_and_line(tmp_path: Path):
    bad = {**HOTPOT_HF, "id": "b", "context": {"title": ["A", "B"], "sentences": [["x."]]}}
    path = _jsonl(tmp_path / "h.jsonl", [HOTPOT_HF, bad])
    with pytest.raises(DataError, match=r"h\.jsonl:2: bad hotpotqa record: field 'context'"):
        load_dataset(path)
    assert len(load_dataset(path, skip_bad=True).questions) == 1


def test_bad_parquet_row_names_file_and_row(tmp_path: Path):
    rows = [dict(MUSIQUE_HF), {**MUSIQUE_HF, "id": "x", "question": None}]
    path = _parquet(tmp_path / "m.parquet", rows)
    with pytest.raises(DataError, match=r"m\.parquet:2: bad musique record: missing required field 'question'"):
        load_dataset(path)


def test_not_parquet(tmp_path: Path):
    pytest.importorskip("pyarrow")
    path = tmp_path / "x.parquet"
    path.write_text("not parquet")
    with pytest.raises(DataError, match=r"x\.parquet: not a readable Parquet file"):
        load_dataset(path)


def test_title_map_with_a_bad_value(tmp_path: Path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"Warsaw": "text", "Paris": 3}, indent=2))
    with pytest.raises(DataError, match=r"c\.json:1: cannot tell the format.*title to a text"):
        load_corpus(path)


def test_broken_pretty_json_names_line(tmp_path: Path):
    path = tmp_path / "c.json"
    path.write_text('{\n  "Warsaw": "text",\n  "Paris": \n}\n')
    with pytest.raises(DataError, match=r"c\.json:4: malformed JSON"):
        load_corpus(path)


# --- Hugging Face datasets: save_to_disk folders and names from the offline cache -------------------

@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An offline Hugging Face datasets cache holding ``hotpot_qa`` / ``distractor`` (validation split),
    laid out as ``datasets`` leaves a dataset it has loaded once."""
    datasets = pytest.importorskip("datasets")
    import shutil

    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True, raising=False)
    src = _parquet(tmp_path / "validation.parquet", [HOTPOT_HF])
    builder = datasets.load_dataset_builder("parquet", name="distractor", data_files={"validation": str(src)},
                                            cache_dir=str(tmp_path / "build"))
    builder.download_and_prepare()
    target = cache / "hotpot_qa" / "distractor" / "0.0.0" / "local"
    shutil.copytree(builder.cache_dir, target)
    for arrow in target.glob("parquet-*.arrow"):
        arrow.rename(target / arrow.name.replace("parquet-", "hotpot_qa-"))
    return cache


def test_hf_by_name_from_offline_cache(hf_cache: Path):
    ds = load_dataset("hf:hotpot_qa/distractor/validation")
    assert ds.format == "hotpotqa" and ds.path == "hf:hotpot_qa/distractor/validation"
    assert [q.id for q in ds.questions] == [HOTPOT_HF["id"]]
    assert _titles(ds, ds.questions[0].gold_doc_ids) == ["Ed Wood", "Scott Derrickson"]


def test_hf_by_name_not_cached(hf_cache: Path):
    with pytest.raises(DataError, match=r"hf:no_such_set/x/validation: not in the local Hugging Face datasets cache"):
        load_dataset("hf:no_such_set/x/validation")
    with pytest.raises(DataError, match=r"hf:hotpot_qa/fullwiki/validation: cannot load it from the local cache"):
        load_dataset("hf:hotpot_qa/fullwiki/validation")


def test_hf_save_to_disk_folder(tmp_path: Path):
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "saved"
    datasets.DatasetDict({"validation": datasets.Dataset.from_list([MUSIQUE_HF])}).save_to_disk(str(folder))
    assert load_dataset(f"hf:{folder}/validation").questions[0].answers == ("Paris", "City of Light")
    assert load_dataset(folder).format == "musique"  # the folder itself: its only split
    with pytest.raises(DataError, match=r"no split 'train'; the splits are \['validation'\]"):
        load_dataset(f"hf:{folder}/train")


def test_hf_without_datasets_package(monkeypatch: pytest.MonkeyPatch):
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(DataError, match=r"hf:hotpot_qa/distractor/validation: .*needs the `datasets` package"):
        load_dataset("hf:hotpot_qa/distractor/validation")
