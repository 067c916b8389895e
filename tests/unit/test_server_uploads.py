"""The HTTP API's index uploads with the fake LLM: a build in the background, the checks on names, sizes and
paths, one build per name, a full build queue."""

from __future__ import annotations

import json
import threading
import time

from fastapi.testclient import TestClient
from tests.unit.test_server import client_for

from tandem.server.app import create_app
from tandem.server.engine import Engine
from tandem.testing.fake_llm import FakeLLM


def test_upload_builds_an_index_in_the_background(tmp_path, index_dir):
    engine = Engine({"demo": index_dir}, FakeLLM(default="Warsaw"), method="naive_rag", uploads=tmp_path / "uploads")
    client = TestClient(create_app(engine, max_upload=100_000))
    files = {"curie.md": "# Curie\n\nMarie Curie was born in Warsaw.", "docs.jsonl":
             json.dumps({"id": "v", "title": "Vistula", "text": "The Vistula flows through Warsaw."}) + "\n",
             "oder.html": "<html><head><title>Oder</title></head><body><p>The <i>Oder</i> flows past Wroclaw.</p></body></html>",
             "rivers.csv": 'id,title,text\nw,Warta,"The Warta flows into the Oder, near Kostrzyn."\n'}
    job = client.post("/v1/indexes", json={"name": "mine", "files": files})
    assert job.status_code == 202
    deadline = time.time() + 30
    while (state := client.get(f"/v1/jobs/{job.json()['id']}").json())["state"] not in ("done", "error"):
        assert time.time() < deadline
        time.sleep(0.05)
    assert state["state"] == "done" and state["passages"] == 4, state
    assert "mine" in [i["name"] for i in client.get("/v1/indexes").json()["indexes"]]
    hits = client.post("/v1/retrieve", json={"query": "Vistula", "index": "mine", "k": 1}).json()["hits"]
    assert hits[0]["title"] == "Vistula"
    hits = client.post("/v1/retrieve", json={"query": "Wroclaw", "index": "mine", "k": 1}).json()["hits"]
    assert (hits[0]["title"], hits[0]["text"]) == ("Oder", "The Oder flows past Wroclaw.")  # the page's text, no markup
    hits = client.post("/v1/retrieve", json={"query": "Kostrzyn", "index": "mine", "k": 1}).json()["hits"]
    assert hits[0]["text"] == "The Warta flows into the Oder, near Kostrzyn."  # a CSV's quoted cell, comma and all
    assert (tmp_path / "uploads" / "mine" / ".tandem.json").exists()  # the CLI's atomic, marked build


def test_upload_checks_names_sizes_and_paths(tmp_path, index_dir):
    engine = Engine({"demo": index_dir}, FakeLLM(default="x"), method="naive_rag", uploads=tmp_path / "uploads")
    client = TestClient(create_app(engine, max_upload=2000))
    bad = client.post("/v1/indexes", json={"name": "../etc", "files": {"a.txt": "x"}})
    assert bad.status_code == 422 and "name: String should match pattern" in bad.json()["error"]["message"]
    bad = client.post("/v1/indexes", json={"name": "ok", "files": {"../../x.txt": "x"}})
    assert bad.status_code == 422 and "should match pattern" in bad.json()["error"]["message"]
    bad = client.post("/v1/indexes", json={"name": "ok", "files": {"a.pdf": "x"}})
    assert bad.status_code == 422
    big = client.post("/v1/indexes", json={"name": "ok", "files": {"a.txt": "x" * 5000}})
    assert big.status_code == 413
    assert not (tmp_path / "uploads").exists()
    no_uploads, _ = client_for(index_dir)
    refused = no_uploads.post("/v1/indexes", json={"name": "ok", "files": {"a.txt": "x"}})
    assert refused.status_code == 405 and refused.headers["allow"] == "GET" and "--uploads DIR" in refused.text


def test_two_uploads_of_one_name_do_not_run_at_once(tmp_path, index_dir):
    gate = threading.Event()
    engine = Engine({"demo": index_dir}, FakeLLM(default="x"), method="naive_rag", uploads=tmp_path / "up", workers=1)
    engine.submit(gate.wait, 10, lane="builds")  # the builder is busy: the first job stays queued
    client = TestClient(create_app(engine))
    files = {"a.txt": "Warsaw is in Poland."}
    assert client.post("/v1/indexes", json={"name": "same", "files": files}).status_code == 202
    again = client.post("/v1/indexes", json={"name": "same", "files": files})
    assert again.status_code == 409 and "being built by another job" in again.json()["error"]["message"]
    gate.set()


def test_an_upload_refused_by_a_full_build_queue_leaves_its_name_free(tmp_path, index_dir):
    from tandem.server.engine import _Pool

    gate = threading.Event()
    engine = Engine({"demo": index_dir}, FakeLLM(default="x"), method="naive_rag", uploads=tmp_path / "up")
    engine._pools["builds"] = _Pool("builds", 1, 1)  # room for one build, running or waiting
    engine.submit(gate.wait, 10, lane="builds")
    client = TestClient(create_app(engine))
    files = {"a.txt": "Warsaw is in Poland."}
    full = client.post("/v1/indexes", json={"name": "later", "files": files})
    assert full.status_code == 429 and "queue is full (1 builds admitted)" in full.json()["error"]["message"]
    gate.set()
    deadline = time.time() + 10
    while (accepted := client.post("/v1/indexes", json={"name": "later", "files": files})).status_code == 429 \
            and time.time() < deadline:
        time.sleep(0.05)  # the gate's slot is released when its future is done
    assert accepted.status_code == 202  # not 409 "being built by another job"
