"""Vector stores: every kind round-trips through its folder, IVF-PQ recall, Qdrant = flat, bad specs."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from tandem.errors import ConfigError, IndexError_
from tandem.index import build_index, open_index
from tandem.index.arrays import RowFile
from tandem.index.vectors import BACKENDS, VectorStore, build_store, new_store, open_store, parse_store
from tandem.retrieve import open_retriever
from tandem.testing.encoders import HashingEncoder

DIM = 32


def clustered(n: int, seed: int = 0, clusters: int = 20) -> np.ndarray:
    """Unit vectors around random centres (nearest neighbours mean something, unlike uniform noise)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, DIM))
    x = centres[rng.integers(0, clusters, n)] + 0.4 * rng.normal(size=(n, DIM))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def recall(rows: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(rows, truth, strict=True)]))


@pytest.fixture(scope="module")
def data():
    x = clustered(3000)
    queries = clustered(50, seed=1)
    truth = np.argsort(-(queries @ x.T), axis=1)[:, :10]
    return x, queries, truth


STORE_PARAMS = {
    "flat": {"faiss": "flat"},
    "ivf": {"faiss": "ivf", "nlist": 16},
    "hnsw": {"faiss": "hnsw"},
    "ivfpq": {"faiss": "ivfpq", "nlist": 16, "pq_m": 16, "pq_nbits": 6},
    "ivfpq-on-disk": {"faiss": "ivfpq", "nlist": 16, "pq_m": 16, "pq_nbits": 6, "on_disk": True},
    "qdrant": {"store": "qdrant"},
}


@pytest.mark.parametrize("name", list(STORE_PARAMS))
def test_each_store_round_trips_through_its_folder(tmp_path, data, name):
    x, queries, truth = data
    x = x[:600] if name == "qdrant" else x  # the embedded Qdrant writes point by point
    built = new_store(STORE_PARAMS[name], DIM, tmp_path)
    assert isinstance(built, VectorStore)
    built.train(x)
    for start in range(0, len(x), 250):  # batches, as a streaming build feeds shards
        built.add(x[start:start + 250])
    before = built.search(queries, 10)
    built.save(tmp_path)
    store = open_store(tmp_path, built.params)
    assert store.ntotal == len(x) and store.dim == DIM
    scores, rows = store.search(queries, 10)
    assert rows.shape == scores.shape == (len(queries), 10)
    np.testing.assert_array_equal(rows, before[1])
    assert np.all(np.diff(scores, axis=1) <= 1e-6)  # best first
    self_hits = store.search(x[:20], 1)[1][:, 0]
    assert np.mean(self_hits == np.arange(20)) >= 0.9
    np.testing.assert_allclose(store.reconstruct_n(5, 3), x[5:8], atol=0.2 if name.startswith("ivfpq") and
                               not built.params.get("rerank") else 1e-5)


def test_ivfpq_with_rerank_recalls_what_flat_finds(tmp_path, data):
    x, queries, truth = data
    plain = build_store(x, {"faiss": "ivfpq", "nlist": 16, "nprobe": 8, "pq_m": 8, "pq_nbits": 6, "rerank": 0},
                        tmp_path)
    reranked = build_store(x, {"faiss": "ivfpq", "nlist": 16, "nprobe": 8, "pq_m": 8, "pq_nbits": 6, "rerank": 20},
                           tmp_path)
    plain_recall = recall(plain.search(queries, 10)[1], truth)
    reranked_recall = recall(reranked.search(queries, 10)[1], truth)
    assert reranked_recall >= 0.9
    assert reranked_recall > plain_recall  # 8-byte codes alone lose neighbours; exact re-scoring wins them back
    assert reranked.params["nlist"] == 16 and reranked.params["pq_m"] == 8


def test_qdrant_embedded_gives_the_same_top_k_as_flat(tmp_path, data, monkeypatch):
    x, queries, _ = data
    flat = build_store(x[:500], {"faiss": "flat"}, tmp_path / "flat")
    monkeypatch.chdir(tmp_path)
    qdrant = build_store(x[:500], {"store": "qdrant", "location": "q"}, tmp_path / "idx")
    assert qdrant.params["location"] == str(tmp_path / "q")  # recorded absolute: opens from anywhere
    monkeypatch.chdir("/")
    flat_scores, flat_rows = flat.search(queries, 10)
    q_scores, q_rows = open_store(tmp_path / "idx", qdrant.params).search(queries, 10)
    np.testing.assert_array_equal(q_rows, flat_rows)
    np.testing.assert_allclose(q_scores, flat_scores, atol=1e-5)
    assert (tmp_path / "q").is_dir() and not (tmp_path / "idx" / "qdrant").exists()


def test_dense_index_through_qdrant_ranks_like_flat(tmp_path, small_docs):
    enc = HashingEncoder()
    build_index(small_docs, tmp_path / "flat", kind="dense", encoder=enc)
    build_index(small_docs, tmp_path / "q", kind="dense", encoder=enc, dense_params={"store": "qdrant"})
    query = "Pierre Curie French physicist Paris"
    flat_hits = open_retriever(open_index(tmp_path / "flat", encoder=enc)).search(query, k=4)
    q_index = open_index(tmp_path / "q", encoder=enc)
    assert q_index.manifest.params["dense"]["store"] == "qdrant" and q_index.manifest.params["dense"]["faiss"] is None
    q_hits = open_retriever(q_index).search(query, k=4)
    assert [h.score for h in q_hits] == pytest.approx([h.score for h in flat_hits], abs=1e-5)
    assert [h.doc_id for h in q_hits][:3] == [h.doc_id for h in flat_hits][:3]  # the 4th ties with the 5th
    assert q_hits[0].doc_id == "d2"


@pytest.mark.parametrize(("spec", "expected"), [
    ("flat", {"store": "faiss", "faiss": "flat"}),
    ("ivfpq", {"store": "faiss", "faiss": "ivfpq"}),
    ("qdrant:/data/q", {"store": "qdrant", "faiss": None, "location": "/data/q"}),
    ("qdrant:http://host:6333", {"store": "qdrant", "faiss": None, "location": "http://host:6333"}),
])
def test_store_specs(spec, expected):
    assert parse_store(spec) == expected


@pytest.mark.parametrize("spec", ["annoy", "flat:x", "", "ivfpq:8"])
def test_bad_store_spec_is_refused_clearly(spec):
    with pytest.raises(ConfigError, match="unknown vector store .*qdrant:PATH"):
        parse_store(spec)


def test_bad_store_settings_are_refused_clearly(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown vector store settings \['nprob'\]"):
        new_store({"faiss": "ivfpq", "nprob": 4}, DIM, tmp_path)
    with pytest.raises(ConfigError, match="unknown vector store 'milvus'"):
        new_store({"store": "milvus"}, DIM, tmp_path)
    with pytest.raises(ConfigError, match="pq_m=5 must divide the vector dimension 32"):
        new_store({"faiss": "ivfpq", "pq_m": 5}, DIM, tmp_path).train(clustered(300))
    with pytest.raises(ConfigError, match=r"expected vectors of shape \(n, 32\)"):
        new_store({"faiss": "flat"}, DIM, tmp_path).add(np.zeros((3, 8), np.float32))


def test_a_dead_qdrant_server_is_named_in_the_error(tmp_path):
    with pytest.raises(IndexError_, match=r"cannot reach the Qdrant server at http://127\.0\.0\.1:9"):
        new_store({"store": "qdrant", "location": "http://127.0.0.1:9", "timeout": 2}, DIM, tmp_path)


def test_registry_names_the_kinds():
    from tandem.registry import STORES

    assert set(BACKENDS) == {"faiss", "qdrant"}
    assert STORES.names() == ["flat", "hnsw", "ivf", "ivfpq", "qdrant"]


def test_store_options_are_checked_against_the_stores_settings():
    assert parse_store("ivfpq", {"nprobe": 160, "pq_m": 48}) == {"store": "faiss", "faiss": "ivfpq", "nprobe": 160,
                                                                  "pq_m": 48}
    with pytest.raises(ConfigError, match=r"ivfpq store settings: unknown setting 'nprob'; valid settings: "
                                          r"\['nlist', 'nprobe', 'on_disk', 'pq_m'"):
        parse_store("ivfpq", {"nprob": 4})
    with pytest.raises(ConfigError, match="flat store settings: unknown setting 'nprobe'; valid settings: \\[\\]"):
        parse_store("flat", {"nprobe": 4})  # a setting of another store is not silently dropped
    with pytest.raises(ConfigError, match="hnsw store settings: setting 'hnsw_m': Input should be greater"):
        parse_store("hnsw", {"hnsw_m": 1})


def test_row_file_reads_the_rows_asked_for(tmp_path):
    rows = np.random.default_rng(3).standard_normal((50, 8)).astype(np.float32)
    path = tmp_path / "rows.f32"
    rows.tofile(path)
    file = RowFile(path, 50, 8)
    picked = np.array([7, 0, 49, 7])
    assert len(file) == 50
    np.testing.assert_array_equal(file[picked], rows[picked])
    np.testing.assert_array_equal(file[10:13], rows[10:13])
    assert file[48:60].shape == (2, 8)  # a slice is clipped like an array's
    with pytest.raises(IndexError, match="row out of range 0..49"):
        file[np.array([50])]


@pytest.mark.parametrize("kind", ["ivf", "ivfpq", "hnsw"])
def test_an_opened_store_searches_with_the_params_it_is_opened_with(tmp_path, data, kind):
    x, _, _ = data
    params = {"faiss": kind, "nlist": 16, "nprobe": 2, "ef_search": 16, "pq_m": 8, "pq_nbits": 6}
    built = new_store(params, DIM, tmp_path)
    built.train(x)
    built.add(x)
    built.save(tmp_path)
    wider = open_store(tmp_path, {**built.params, "nprobe": 9, "ef_search": 99})
    if kind == "hnsw":
        assert wider.index.hnsw.efSearch == 99
    else:
        assert faiss.extract_index_ivf(wider.index).nprobe == 9  # not the 2 saved inside the FAISS file
