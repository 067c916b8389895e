"""Streaming index builds: shards equal one pass, a killed build resumes, documents are appended."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from functools import partial

import bm25s
import numpy as np
import pytest
from tests.conftest import sigint_default

from tandem.errors import ConfigError, DamagedError, DataError, IndexError_
from tandem.index import add_documents, build_index, corpus_hash, open_index
from tandem.index.bm25 import DEFAULT_BM25, tokenize
from tandem.index.manifest import MANIFEST
from tandem.index.store import DiskDocs, DocStore
from tandem.index.stream import PROGRESS, work_dir
from tandem.index.vectors import FaissStore, build_store
from tandem.outdir import MARKER
from tandem.retrieve import open_retriever
from tandem.testing.encoders import HashingEncoder
from tandem.types import Document

WORDS = "river capital physicist prize warsaw paris vistula seine poland france nobel born city long".split()
QUERIES = ["capital river poland", "nobel prize physicist", "seine city", "long vistula born"]


def corpus(n: int, start: int = 0) -> list[Document]:
    """Deterministic varied passages (word choice by a seeded generator)."""
    rng = np.random.default_rng(start)
    return [Document(f"p{i}", f"Title {i}", " ".join(rng.choice(WORDS, size=6 + i % 5)) + f" number{i}")
            for i in range(start, start + n)]


class CountingEncoder(HashingEncoder):
    """A HashingEncoder that counts the texts it encoded."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    def encode(self, texts, **kw):
        self.seen += len(texts)
        return super().encode(texts, **kw)


def vectors(folder) -> np.ndarray:
    index = open_index(folder).faiss
    return index.reconstruct_n(0, index.ntotal)


def results(folder, kind: str) -> list[list[tuple[str, float]]]:
    retriever = open_retriever(open_index(folder, encoder=HashingEncoder()), kind)
    return [[(h.doc_id, round(h.score, 5)) for h in retriever.search(q, 5)] for q in QUERIES]


def assert_same_index(a, b) -> None:
    assert (a / "docs.jsonl").read_bytes() == (b / "docs.jsonl").read_bytes()
    ma, mb = (json.loads((f / MANIFEST).read_text()) for f in (a, b))
    assert ma["corpus_hash"] == mb["corpus_hash"] and ma["doc_count"] == mb["doc_count"]
    np.testing.assert_array_equal(vectors(a), vectors(b))
    assert results(a, "bm25") == results(b, "bm25")
    assert results(a, "dense") == results(b, "dense")


def test_sharded_build_equals_one_pass(tmp_path):
    docs = corpus(23)
    build_index(docs, tmp_path / "one", encoder=HashingEncoder(), shard_size=1000)
    build_index(iter(docs), tmp_path / "sharded", encoder=HashingEncoder(), shard_size=4)  # an iterator, read once
    assert_same_index(tmp_path / "one", tmp_path / "sharded")
    # the vectors are the encoder's, row for row; the hash is the whole corpus's; no work folder is left
    np.testing.assert_array_equal(vectors(tmp_path / "sharded"), HashingEncoder().encode([d.contents for d in docs]))
    assert open_index(tmp_path / "sharded").manifest.corpus_hash == corpus_hash(docs)
    assert not work_dir(tmp_path / "sharded").exists()


@pytest.mark.parametrize("method", ["lucene", "atire", "bm25l"])
def test_streamed_bm25_scores_equal_bm25s_over_token_strings(tmp_path, monkeypatch, method):
    """The streamed token pass and chunked scoring give bm25s' scores (indexing the token lists in
    memory) to the bit; documents without any token included."""
    import tandem.index.bm25 as bm25_module

    monkeypatch.setattr(bm25_module, "_score_matrix", partial(bm25_module._score_matrix, chunk_tokens=20))
    docs = [*corpus(40), Document("empty", "", "the and of")]
    params = {**DEFAULT_BM25, "method": method}
    build_index(docs, tmp_path / "idx", kind="bm25", shard_size=7, bm25_params=params)
    model = bm25s.BM25(k1=params["k1"], b=params["b"], method=method)
    model.index(tokenize([d.contents for d in docs], params), show_progress=False)
    ours = open_index(tmp_path / "idx").bm25
    for q in QUERIES:
        tokens = tokenize([q], params)
        np.testing.assert_array_equal(ours.get_scores(tokens[0]), model.get_scores(tokens[0]))


def test_doc_store_is_memory_mapped_and_keeps_its_api(tmp_path):
    docs = corpus(12)
    build_index(docs, tmp_path / "idx", kind="bm25", shard_size=5)
    store = open_index(tmp_path / "idx").store
    assert isinstance(store.docs, DiskDocs) and len(store) == 12
    assert store.get("p7") == docs[7] and store.index_of["p11"] == 11 and "p3" in store
    assert list(store.docs) == docs and store.docs[-1] == docs[-1] and store.docs[2:4] == docs[2:4]
    with pytest.raises(IndexError):
        store.docs[12]
    assert DocStore.load(tmp_path / "idx").get("p0") == docs[0]


def test_retrievers_of_an_index_share_one_read_of_its_ids(tmp_path, monkeypatch):
    docs = corpus(12)
    build_index(docs, tmp_path / "idx", encoder=HashingEncoder(), shard_size=5)
    index = open_index(tmp_path / "idx", encoder=HashingEncoder())
    reads = []
    iterate = DiskDocs.__iter__
    monkeypatch.setattr(DiskDocs, "__iter__", lambda self: (reads.append(1), iterate(self))[1])
    retrievers = [open_retriever(index, kind) for kind in ("bm25", "dense", "hybrid")]
    assert index.store.index_of["p11"] == 11 and index.store.ids == [d.id for d in docs]
    assert len(reads) == 1  # one pass over docs.jsonl, however many retrievers and lookups
    assert all(r.search(QUERIES[0], 3) for r in retrievers)


def test_interrupted_build_resumes_at_the_last_finished_shard(tmp_path):
    docs = corpus(20)
    build_index(docs, tmp_path / "ref", encoder=HashingEncoder(), shard_size=4)

    def stop_after_two_shards(done, total):
        assert total == 20
        if done > 8:  # inside shard 3, after shards 1 and 2 were written
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_index(docs, tmp_path / "idx", encoder=HashingEncoder(), shard_size=4, on_progress=stop_after_two_shards)
    assert not (tmp_path / "idx").exists()
    assert len(json.loads((work_dir(tmp_path / "idx") / PROGRESS).read_text())["shards"]) == 2
    enc = CountingEncoder()
    build_index(docs, tmp_path / "idx", encoder=enc, shard_size=4)
    assert enc.seen == 12  # shards 3..5 only
    assert_same_index(tmp_path / "ref", tmp_path / "idx")


def test_resume_re_encodes_from_where_the_corpus_changed(tmp_path):
    docs = corpus(20)
    with pytest.raises(KeyboardInterrupt):
        build_index(docs, tmp_path / "idx", encoder=HashingEncoder(), shard_size=4,
                    on_progress=lambda done, total: done > 16 and (_ for _ in ()).throw(KeyboardInterrupt))
    changed = [*docs[:10], Document("p10", "Title 10", "a different text"), *docs[11:]]
    enc = CountingEncoder()
    build_index(changed, tmp_path / "idx", encoder=enc, shard_size=4)
    assert enc.seen == 12  # shards 0 and 1 kept; shard 2 holds the change
    build_index(changed, tmp_path / "ref", encoder=HashingEncoder(), shard_size=4)
    assert_same_index(tmp_path / "ref", tmp_path / "idx")
    assert open_index(tmp_path / "idx").manifest.corpus_hash == corpus_hash(changed)
    # a corpus that ends before the finished shards do: its own hash, not the old shards'
    with pytest.raises(KeyboardInterrupt):
        build_index(docs, tmp_path / "short", encoder=HashingEncoder(), shard_size=4,
                    on_progress=lambda done, total: done > 16 and (_ for _ in ()).throw(KeyboardInterrupt))
    build_index(docs[:10], tmp_path / "short", encoder=HashingEncoder(), shard_size=4)
    assert open_index(tmp_path / "short").manifest.corpus_hash == corpus_hash(docs[:10])
    # other settings start the work over
    with pytest.raises(KeyboardInterrupt):
        build_index(docs, tmp_path / "x", encoder=HashingEncoder(), shard_size=4,
                    on_progress=lambda done, total: done > 8 and (_ for _ in ()).throw(KeyboardInterrupt))
    enc = CountingEncoder()
    build_index(docs, tmp_path / "x", encoder=enc, shard_size=5)
    assert enc.seen == 20


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_killed_build_resumes_and_equals_an_uninterrupted_one(tmp_path, sig):
    """SIGKILL or Ctrl-C a build while it encodes (1 to 5 of its 6 shards done: the signal lands
    mid-encode): the target never appears; the same build run again continues at the last finished
    shard and gives the uninterrupted result."""
    out = tmp_path / "idx"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_index_stream import corpus
        from tandem.index import build_index
        from tandem.testing.encoders import HashingEncoder
        build_index(corpus(300), {str(out)!r}, kind="hybrid", encoder=HashingEncoder(delay_per_text=0.01), shard_size=50)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                            preexec_fn=sigint_default)
    progress = work_dir(out) / PROGRESS
    deadline = time.time() + 60
    while time.time() < deadline and not (progress.exists() and json.loads(progress.read_text())["shards"]):
        time.sleep(0.05)
    proc.send_signal(sig)
    assert proc.wait() != 0
    assert not out.exists()
    with pytest.raises(IndexError_):
        open_index(out)
    finished = len(json.loads(progress.read_text())["shards"])
    assert 1 <= finished < 6
    enc = CountingEncoder()
    build_index(corpus(300), out, kind="hybrid", encoder=enc, shard_size=50)
    assert enc.seen == 300 - 50 * finished
    build_index(corpus(300), tmp_path / "ref", kind="hybrid", encoder=HashingEncoder(), shard_size=50)
    assert_same_index(tmp_path / "ref", out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx", "ref"]


def test_failure_before_any_shard_leaves_no_work_folder(tmp_path):
    class Broken(HashingEncoder):
        def encode(self, texts, **kw):
            raise RuntimeError("encoder crashed")

    with pytest.raises(RuntimeError):
        build_index(corpus(5), tmp_path / "idx", encoder=Broken())
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ConfigError, match="empty corpus"):
        build_index(iter([]), tmp_path / "idx", kind="bm25")
    with pytest.raises(ConfigError, match="shard size"):
        build_index(corpus(5), tmp_path / "idx", kind="bm25", shard_size=0)


def test_duplicate_ids_in_a_streamed_corpus(tmp_path):
    docs = [*corpus(6), Document("p2", "Again", "another text")]
    with pytest.raises(DataError, match=r"duplicate document id 'p2' in the corpus \(documents 2 and 6\)"):
        build_index(iter(docs), tmp_path / "idx", kind="bm25", shard_size=3)
    assert not (tmp_path / "idx").exists()
    enc = CountingEncoder()  # a list is checked before any encoding
    with pytest.raises(DataError, match=r"duplicate document id 'p2' in the corpus \(rows 2 and 6\)"):
        build_index(docs, tmp_path / "idx", encoder=enc, shard_size=3)
    assert enc.seen == 0


def test_add_documents_encodes_only_the_new_ones(tmp_path):
    first, more = corpus(15), corpus(6, start=15)
    build_index(first, tmp_path / "idx", encoder=HashingEncoder(), shard_size=4)
    enc = CountingEncoder()
    manifest = add_documents(tmp_path / "idx", iter(more), encoder=enc, shard_size=4)
    assert enc.seen == 6
    assert manifest.doc_count == 21 and manifest.corpus_hash == corpus_hash(first + more)
    build_index(first + more, tmp_path / "ref", encoder=HashingEncoder(), shard_size=4)
    assert_same_index(tmp_path / "ref", tmp_path / "idx")
    idx = open_index(tmp_path / "idx", encoder=HashingEncoder())
    for kind in ("bm25", "dense", "hybrid"):
        hits = open_retriever(idx, kind).search(more[3].contents, 1)
        assert hits[0].doc_id == "p18"


def test_add_refuses_ids_already_in_the_index(tmp_path):
    build_index(corpus(5), tmp_path / "idx", kind="bm25")
    before = (tmp_path / "idx" / "docs.jsonl").read_bytes()
    with pytest.raises(DataError, match=r"document id 'p3' is already in the index .*idx \(row 3\)"):
        add_documents(tmp_path / "idx", [Document("new", "N", "new text"), Document("p3", "Clash", "other text")])
    assert (tmp_path / "idx" / "docs.jsonl").read_bytes() == before
    with pytest.raises(DataError, match="duplicate document id 'n'"):
        add_documents(tmp_path / "idx", [Document("n", "N", "new text"), Document("n", "N", "new text")])
    with pytest.raises(IndexError_, match="no such folder"):
        add_documents(tmp_path / "nothing", corpus(2))


def test_iter_corpus_streams_the_passages_load_corpus_gives(tmp_path):
    from tandem.corpus import load_corpus
    from tandem.corpus.loaders import iter_corpus

    path = tmp_path / "c.jsonl"
    long_text = " ".join(f"word{i}" for i in range(30))
    path.write_text("".join(json.dumps({"id": f"c{i}", "title": f"T{i}", "text": long_text if i == 2 else f"text {i}"}) + "\n"
                            for i in range(5)) + "{not json\n")
    stream = iter_corpus(path, max_tokens=12, overlap=2)
    assert next(stream).id == "c0"  # lazily: the bad last line is not read yet
    with pytest.raises(DataError, match=r"c.jsonl:6"):
        list(stream)
    path.write_text("\n".join(path.read_text().splitlines()[:5]) + "\n")
    assert list(iter_corpus(path, max_tokens=12, overlap=2)) == load_corpus(path, max_tokens=12, overlap=2)


def test_cli_streams_a_corpus_file_and_adds_documents(tmp_path):
    def write(path, docs):
        path.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in docs))

    write(tmp_path / "a.jsonl", corpus(9))
    write(tmp_path / "b.jsonl", corpus(3, start=9))
    run = [sys.executable, "-m", "tandem.cli", "index"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    built = subprocess.run([*run, "--corpus", str(tmp_path / "a.jsonl"), "--kind", "bm25", "--shard-size", "2",
                            "--out", str(tmp_path / "idx")], capture_output=True, text=True, env=env)
    assert built.returncode == 0, built.stderr
    added = subprocess.run([*run, "--add", str(tmp_path / "b.jsonl"), "--index", str(tmp_path / "idx"), "--json"],
                           capture_output=True, text=True, env=env)
    assert added.returncode == 0, added.stderr
    assert '"added": 3' in added.stdout
    idx = open_index(tmp_path / "idx")
    assert len(idx.store) == 12 and open_retriever(idx).search(corpus(3, start=9)[1].contents, 1)[0].doc_id == "p10"
    again = subprocess.run([*run, "--add", str(tmp_path / "b.jsonl"), "--index", str(tmp_path / "idx")],
                           capture_output=True, text=True, env=env)
    assert again.returncode != 0 and re.search(r"document id 'p(9|10|11)' is already in the index", again.stderr)
    assert "Traceback" not in again.stderr and len(open_index(tmp_path / "idx").store) == 12


def test_a_truncated_docs_file_is_a_clear_error(tmp_path):
    build_index(corpus(6), tmp_path / "idx", kind="bm25")
    docs_file = tmp_path / "idx" / "docs.jsonl"
    docs_file.write_bytes(docs_file.read_bytes()[:-10])
    with pytest.raises(DamagedError, match=r"docs.jsonl is \d+ bytes, \d+ were written: the file is damaged; rebuild"):
        open_index(tmp_path / "idx")
    marker = json.loads((tmp_path / "idx" / MARKER).read_text())
    del marker["files"]  # a folder from before the file records: the offsets still catch it
    (tmp_path / "idx" / MARKER).write_text(json.dumps(marker))
    with pytest.raises(DamagedError, match=r"cannot read .*docs.jsonl .*docs.offsets.npy does not match docs.jsonl"):
        open_index(tmp_path / "idx")


def test_add_extends_an_hnsw_store_and_refuses_one_it_cannot_extend(tmp_path):
    from tandem.errors import ConfigError

    first, more = corpus(15), corpus(6, start=15)
    build_index(first, tmp_path / "hnsw", kind="dense", encoder=HashingEncoder(), dense_params={"faiss": "hnsw"})
    add_documents(tmp_path / "hnsw", more, encoder=HashingEncoder())
    idx = open_index(tmp_path / "hnsw", encoder=HashingEncoder())
    assert idx.manifest.doc_count == 21 and idx.faiss.ntotal == 21
    assert open_retriever(idx, "dense").search(more[3].contents, 1)[0].doc_id == "p18"
    build_index(first, tmp_path / "q", kind="dense", encoder=HashingEncoder(), dense_params={"store": "qdrant"})
    before = (tmp_path / "q" / "docs.jsonl").read_bytes()
    with pytest.raises(ConfigError, match="'qdrant' store, which --add cannot extend"):
        add_documents(tmp_path / "q", more, encoder=HashingEncoder())
    assert (tmp_path / "q" / "docs.jsonl").read_bytes() == before


def test_ivfpq_build_reads_only_its_training_rows_and_equals_an_in_memory_build(tmp_path, monkeypatch):
    docs = corpus(600)
    params = {"faiss": "ivfpq", "nlist": 4, "pq_m": 8, "pq_nbits": 6, "train_size": 100, "rerank": 0}
    build_index(docs, tmp_path / "flat", kind="dense", encoder=HashingEncoder(), shard_size=128)
    x = vectors(tmp_path / "flat")
    seen = []
    train = FaissStore.train
    monkeypatch.setattr(FaissStore, "train", lambda self, sample: (seen.append(len(sample)), train(self, sample))[1])
    build_index(docs, tmp_path / "pq", kind="dense", encoder=HashingEncoder(), shard_size=128, dense_params=params)
    assert seen == [100]  # the sampled rows only, not every candidate row of the shards
    reference = build_store(x, params, tmp_path / "ref")  # all rows in memory, subsampled by the store
    np.testing.assert_array_equal(open_index(tmp_path / "pq").faiss.search(x[:30], 5)[1], reference.search(x[:30], 5)[1])
