"""Index folders: build, load, manifest checks, atomic replacement, a killed build."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from tandem.errors import ConfigError, IndexError_, IndexMismatchError
from tandem.index import build_index, open_index
from tandem.index.manifest import MANIFEST
from tandem.retrieve import open_retriever
from tandem.testing.encoders import HashingEncoder
from tandem.types import Document


def test_bm25_index_ranks_lexical_match_first(tmp_path, small_docs):
    build_index(small_docs, tmp_path / "idx", kind="bm25")
    hits = open_retriever(tmp_path / "idx").search("Which river is the longest in Poland?", k=3)
    assert hits[0].doc_id == "d4"
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert all(h.source == "bm25" for h in hits)
    assert hits == sorted(hits, key=lambda h: -h.score)


def test_bm25_drops_zero_score_documents(tmp_path, small_docs):
    build_index(small_docs, tmp_path / "idx", kind="bm25")
    assert open_retriever(tmp_path / "idx").search("zyxxy unknownword", k=5) == []


@pytest.mark.parametrize("faiss_kind", ["flat", "ivf", "hnsw"])
def test_dense_index_kinds(tmp_path, small_docs, faiss_kind):
    enc = HashingEncoder()
    build_index(small_docs, tmp_path / "idx", kind="dense", encoder=enc, dense_params={"faiss": faiss_kind, "nlist": 2})
    idx = open_index(tmp_path / "idx", encoder=enc)
    hits = open_retriever(idx).search("Pierre Curie French physicist Paris", k=2)
    assert hits[0].doc_id == "d2" and hits[0].source == "dense"
    assert idx.manifest.params["dense"]["faiss"] == faiss_kind


def test_hybrid_fuses_both(tmp_path, small_docs):
    enc = HashingEncoder()
    build_index(small_docs, tmp_path / "idx", kind="hybrid", encoder=enc)
    idx = open_index(tmp_path / "idx", encoder=enc)
    hits = open_retriever(idx).search("capital of Poland Warsaw", k=3)
    assert hits[0].doc_id == "d3" and hits[0].source == "hybrid"
    assert len({h.doc_id for h in hits}) == 3
    weighted = open_retriever(idx, fusion="weighted").search("capital of Poland Warsaw", k=3)
    assert weighted[0].doc_id == "d3"
    assert open_retriever(idx, "bm25").search("Warsaw", k=1)[0].source == "bm25"


def test_manifest_records_what_built_it(tmp_path, small_docs):
    m = build_index(small_docs, tmp_path / "idx", kind="hybrid", encoder=HashingEncoder(dim=32))
    loaded = open_index(tmp_path / "idx").manifest
    assert loaded == m
    assert (loaded.kind, loaded.doc_count, loaded.encoder, loaded.dim) == ("hybrid", 5, "hashing", 32)
    assert loaded.params["bm25"]["k1"] == 1.5 and loaded.params["dense"]["faiss"] == "flat"
    assert len(loaded.corpus_hash) == 64


def test_mismatched_encoder_or_corpus(tmp_path, small_docs):
    build_index(small_docs, tmp_path / "idx", kind="dense", encoder=HashingEncoder())
    with pytest.raises(IndexMismatchError, match="built with encoder 'hashing', not 'minilm'"):
        open_index(tmp_path / "idx", encoder="minilm")
    other = small_docs[:4] + [Document("d5", "Paris", "Paris is in France.")]
    with pytest.raises(IndexMismatchError, match="different corpus"):
        open_index(tmp_path / "idx", corpus=other)
    open_index(tmp_path / "idx", corpus=small_docs, encoder="hashing")  # the same corpus passes


def test_missing_or_incomplete_index(tmp_path):
    with pytest.raises(IndexError_, match="no such folder"):
        open_index(tmp_path / "nope")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "docs.jsonl").write_text("")
    with pytest.raises(IndexError_, match="build did not finish"):
        open_index(tmp_path / "half")


def test_extras_stored_beside_vectors(tmp_path, small_docs):
    def cls_layers(store, enc):
        return {"layer_cls": np.ones((len(store), 3, 4), dtype=np.float16)}

    build_index(small_docs, tmp_path / "idx", kind="dense", encoder=HashingEncoder(), extras=[cls_layers])
    idx = open_index(tmp_path / "idx")
    arr = idx.extra("layer_cls")
    assert arr.shape == (5, 3, 4) and arr.dtype == np.float16
    assert idx.manifest.extras["layer_cls"]["shape"] == [5, 3, 4]
    with pytest.raises(IndexError_, match="no extra array 'tokens'"):
        idx.extra("tokens")


def test_failed_build_keeps_previous_index(tmp_path, small_docs):
    build_index(small_docs, tmp_path / "idx", kind="bm25")

    class Broken(HashingEncoder):
        def encode(self, texts, **kw):
            raise RuntimeError("encoder crashed")

    with pytest.raises(RuntimeError):
        build_index(small_docs[:2], tmp_path / "idx", kind="dense", encoder=Broken())
    assert open_index(tmp_path / "idx").manifest.doc_count == 5
    assert [p.name for p in tmp_path.iterdir()] == ["idx"]


def test_refuses_to_replace_a_non_index_folder(tmp_path, small_docs):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="was not made by tandem"):
        build_index(small_docs, tmp_path / "mine", kind="bm25")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_killed_build_leaves_nothing_that_loads(tmp_path):
    """SIGKILL a build while it assembles the folder: the target never appears; the next build cleans up.
    (A kill while encoding: tests/unit/test_index_stream.py.)"""
    out = tmp_path / "idx"
    script = textwrap.dedent(f"""
        import time
        from tandem.index import build_index
        from tandem.testing.encoders import HashingEncoder
        from tandem.types import Document
        docs = [Document(str(i), "t", f"text number {{i}}") for i in range(400)]
        build_index(docs, {str(out)!r}, kind="hybrid", encoder=HashingEncoder(),
                    extras=[lambda store, enc: time.sleep(60) or {{}}])
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    deadline = time.time() + 60
    while not list(tmp_path.glob(".idx.building-*/dense.faiss")) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # now inside the (slow) extra
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists()
    leftovers = list(tmp_path.glob(".idx.building-*"))
    assert leftovers and not (leftovers[0] / MANIFEST).exists()
    with pytest.raises(IndexError_):
        open_index(out)
    build_index([Document("a", "t", "fresh text")], out, kind="bm25")
    assert open_index(out).manifest.doc_count == 1
    assert not list(tmp_path.glob(".idx.building-*"))


def test_bm25_over_documents_without_a_word_finds_nothing(tmp_path):
    """Documents of stop words and single characters leave BM25 no term at all: searching finds nothing
    (bm25s itself raises on a query term it cannot place)."""
    from tandem.retrieve import open_retriever

    build_index([Document("a", "0", "1"), Document("b", "", "the of")], tmp_path / "idx", kind="bm25")
    retriever = open_retriever(tmp_path / "idx")
    assert retriever.search("Warsaw city", 5) == [] and retriever.search_batch(["the", "x y"], 2) == [[], []]
