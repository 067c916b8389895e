"""Damaged files and full disks: every component of an index, every checkpoint, named with its fix;
a write that fails for want of space or permission is exit 1 naming the path, with nothing
half-written in place and the resumable work folder named (docs/reliability.md, fault matrix)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tandem.errors import DamagedError, DataError, WriteError
from tandem.index import build_index, open_index, verify_index
from tandem.index.passage_graph import GraphExtra
from tandem.index.stream import PROGRESS, WorkFolder, work_dir
from tandem.outdir import MARKER
from tandem.testing.encoders import HashingEncoder
from tandem.types import Document

ROOT = Path(__file__).resolve().parents[2]
WORDS = "river castle poet violin harbour engine meadow lantern glacier orchard".split()


def corpus(n: int) -> list[Document]:
    rng = np.random.default_rng(7)
    return [Document(f"p{i}", f"Title {i}", " ".join(rng.choice(WORDS, size=8)) + f" number{i}") for i in range(n)]


def tandem(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tandem.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("built") / "idx"
    build_index(corpus(40), folder, kind="hybrid", encoder=HashingEncoder(), extras=[GraphExtra()])
    return folder


def copy_of(built: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(built, tmp_path / "idx"))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def flip(path: Path, at: int = -3) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def use_every_component(folder: Path) -> None:
    idx = open_index(folder, encoder=HashingEncoder())
    _ = idx.bm25, idx.faiss
    for name in idx.manifest.extras:
        idx.extra(name)


COMPONENTS = ["dense.faiss", "bm25/data.csc.index.npy", "bm25/vocab.index.json", "docs.jsonl", "docs.offsets.npy",
              "extras/graph_src.npy", "manifest.json"]


@pytest.mark.parametrize("component", COMPONENTS)
def test_a_truncated_component_is_named_with_its_fix_on_open(built, tmp_path, component):
    folder = copy_of(built, tmp_path)
    truncate(folder / component)
    with pytest.raises(DamagedError) as caught:
        use_every_component(folder)
    message = str(caught.value)
    assert str(folder / component) in message and "were written: the file is damaged" in message
    if component.startswith("extras/"):
        assert f"tandem index --index {folder} --add-extras graph" in message
    else:
        assert f"rebuild the index: tandem index --out {folder}" in message


@pytest.mark.parametrize("component", COMPONENTS)
def test_a_flipped_byte_is_found_by_verify(built, tmp_path, component):
    folder = copy_of(built, tmp_path)
    assert verify_index(folder)["files"] == len(json.loads((folder / MARKER).read_text())["files"])
    flip(folder / component)
    with pytest.raises(DamagedError, match=rf"{component}.* content differs from what was written \(sha256\)"):
        verify_index(folder)


@pytest.mark.parametrize("component", ["dense.faiss", "bm25/data.csc.index.npy", "bm25/params.index.json",
                                       "extras/graph_weight.npy"])
def test_a_folder_without_file_records_still_names_an_unreadable_component(built, tmp_path, component):
    folder = copy_of(built, tmp_path)
    marker = json.loads((folder / MARKER).read_text())
    del marker["files"]  # as written before the records existed
    (folder / MARKER).write_text(json.dumps(marker))
    truncate(folder / component)
    with pytest.raises(DamagedError, match=rf"cannot read {folder}/{component.split('/')[0]}.*the file is damaged"):
        use_every_component(folder)


def test_index_verify_on_the_command_line(built, tmp_path):
    folder = copy_of(built, tmp_path)
    ok = tandem("index", "verify", str(folder), "--json")
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report["files"] >= 10 and report["documents"] == 40 and "dense" in report["components"]
    flip(folder / "dense.faiss", at=-100)
    bad = tandem("index", "verify", str(folder))
    assert bad.returncode == 2
    assert f"{folder}/dense.faiss content differs" in bad.stderr and "internal error" not in bad.stderr
    truncate(folder / "dense.faiss")
    res = tandem("retrieve", "--index", str(folder), "river")
    assert res.returncode == 2 and "dense.faiss is" in res.stderr and "internal error" not in res.stderr


def test_damaged_r2former_and_trainer_checkpoints_are_named(tmp_path):
    from tandem.methods.r2ag.former import R2Former, R2FormerConfig, load_r2former, load_trainer_state, save_checkpoint

    model = R2Former(R2FormerConfig(llm_hidden=8, d_model=16, heads=2, ff=32, max_k=4))
    folder = save_checkpoint(tmp_path / "ckpt", model, trainer={"step": 3})
    assert load_trainer_state(folder)["step"] == 3
    load_r2former(folder)
    truncate(folder / "r2former.pt")
    with pytest.raises(DamagedError, match=r"r2former.pt is \d+ bytes.*train it again: tandem train r2ag"):
        load_r2former(folder)
    marker = json.loads((folder / MARKER).read_text())
    del marker["files"]
    (folder / MARKER).write_text(json.dumps(marker))
    with pytest.raises(DamagedError, match=r"cannot read .*r2former.pt .*the file is damaged"):
        load_r2former(folder)
    truncate(folder / "trainer.pt")
    with pytest.raises(DamagedError, match=r"trainer.pt .*damaged; delete .* to start over"):
        load_trainer_state(folder)


def test_a_damaged_tuned_retriever_folder_is_named(tmp_path):
    from tandem.model_files import resolve_model
    from tandem.outdir import add_file, atomic_dir

    with atomic_dir(tmp_path / "retr", "retriever") as tmp:
        (tmp / "model.safetensors").write_bytes(b"x" * 100)
    add_file(tmp_path / "retr", "eval.json", "{}")  # a file added later is recorded too
    assert resolve_model(str(tmp_path / "retr")) == str((tmp_path / "retr").resolve())
    (tmp_path / "retr" / "eval.json").write_text("{}   ")
    with pytest.raises(DamagedError, match=r"eval.json is 5 bytes, 2 were written"):
        resolve_model(str(tmp_path / "retr"))
    (tmp_path / "retr" / "eval.json").write_text("{}")
    truncate(tmp_path / "retr" / "model.safetensors")
    with pytest.raises(DamagedError, match=r"model.safetensors is 50 bytes, 100 were written"):
        resolve_model(str(tmp_path / "retr"))


# -- full disks and read-only targets ---------------------------------------------------------

def enospc(path: object = "x") -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def test_a_full_disk_mid_encode_keeps_the_work_folder_named_and_the_build_resumes(tmp_path, monkeypatch):
    docs, out = corpus(60), tmp_path / "idx"
    finish = WorkFolder.finish

    def fill_up(self, shard_docs, vectors, running):
        if len(self.shards) == 3:
            raise enospc(self.path / "shard-00003.npy")
        return finish(self, shard_docs, vectors, running)

    monkeypatch.setattr(WorkFolder, "finish", fill_up)
    with pytest.raises(WriteError) as caught:
        build_index(docs, out, kind="dense", encoder=HashingEncoder(), shard_size=10)
    message = str(caught.value)
    assert "No space left on device" in message and str(work_dir(out)) in message
    assert "the 30 documents encoded so far are kept" in message and "run the same command again" in message
    assert not out.exists() and not list(tmp_path.glob(".idx.building-*"))
    assert len(json.loads((work_dir(out) / PROGRESS).read_text())["shards"]) == 3
    monkeypatch.setattr(WorkFolder, "finish", finish)
    encoder = HashingEncoder()
    build_index(docs, out, kind="dense", encoder=encoder, shard_size=10)
    assert not work_dir(out).exists()
    build_index(docs, tmp_path / "clean", kind="dense", encoder=HashingEncoder(), shard_size=10)
    assert (out / "dense.faiss").read_bytes() == (tmp_path / "clean" / "dense.faiss").read_bytes()


def test_a_full_disk_while_assembling_keeps_the_old_index(tmp_path, monkeypatch):
    import tandem.index.bm25 as bm25

    out = tmp_path / "idx"
    build_index(corpus(10), out, kind="bm25")
    before = (out / "docs.jsonl").read_bytes()

    def fail(*_args, **_kwargs):
        raise enospc(tmp_path / "x.npy")

    monkeypatch.setattr(bm25.BM25Builder, "save", fail)
    with pytest.raises(WriteError, match=rf"cannot write {tmp_path}/idx: No space left on device"):
        build_index(corpus(20), out, kind="bm25")
    assert (out / "docs.jsonl").read_bytes() == before  # the old index, whole
    assert not list(tmp_path.glob(".idx.building-*"))
    open_index(out)


def test_a_read_only_target_is_a_write_error_naming_it(tmp_path, monkeypatch):
    from tandem.io import write_json_atomic

    def read_only(*_args, **_kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path / ".a.json.tmp"))

    monkeypatch.setattr("tempfile.mkstemp", read_only)
    with pytest.raises(WriteError, match=rf"cannot write {tmp_path}/a.json: Read-only file system"):
        write_json_atomic(tmp_path / "a.json", {"a": 1})


def test_a_full_disk_in_eval_qa_exits_1_keeps_the_answers_and_resumes(tmp_path, monkeypatch, capsys, caplog):
    from tandem.cli import main
    from tandem.eval.runner import PREDICTIONS, load_done

    dataset = tmp_path / "items.jsonl"
    dataset.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is item {i}?", "answer": f"item{i}"}) + "\n"
                               for i in range(6)))
    run = tmp_path / "run"
    fsync, synced = os.fsync, []

    def fill_up(fd):  # the 4th answer reaches the disk only in part, then the disk is full
        if os.readlink(f"/proc/self/fd/{fd}").endswith(PREDICTIONS):
            synced.append(fd)
            if len(synced) == 4:
                os.ftruncate(fd, os.fstat(fd).st_size - 10)
                raise enospc(run / PREDICTIONS)
        fsync(fd)

    monkeypatch.setattr(os, "fsync", fill_up)
    argv = ["tandem", "eval", "qa", "--method", "direct", "--dataset", str(dataset), "--llm", "fake:x", "--out", str(run)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as code:
        main()
    err = capsys.readouterr().err
    assert code.value.code == 1, err
    assert f"cannot write predictions {run / PREDICTIONS}: No space left on device" in " ".join(err.split())
    assert "run the same command again to resume" in " ".join(err.split()) and "internal error" not in err
    assert not (run / PREDICTIONS).read_text().endswith("\n")  # the torn line is there ...
    monkeypatch.setattr(os, "fsync", fsync)
    main()  # the resume: exit 0
    assert "predictions.jsonl:4: cut 1 torn last line" in caplog.text
    lines = (run / PREDICTIONS).read_text().splitlines()
    assert sorted(json.loads(line)["id"] for line in lines) == [f"q{i}" for i in range(6)]  # each exactly once
    assert len(load_done(run / PREDICTIONS)) == 6


def test_a_full_disk_while_saving_a_checkpoint_keeps_the_previous_one(tmp_path, monkeypatch):
    from tandem.methods.r2ag import former as R

    model = R.R2Former(R.R2FormerConfig(llm_hidden=8, d_model=16, heads=2, ff=32, max_k=4))
    folder = R.save_checkpoint(tmp_path / "ckpt", model, trainer={"step": 1})
    save = torch.save

    def fill_up(obj, path, *args, **kwargs):
        if str(path).endswith("trainer.pt"):
            raise enospc(path)
        return save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", fill_up)
    with pytest.raises(WriteError, match=rf"cannot write {folder}: No space left on device"):
        R.save_checkpoint(folder, model, trainer={"step": 2})
    assert R.load_trainer_state(folder)["step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_an_unexpected_os_error_of_the_disk_is_exit_1_not_internal(tmp_path, monkeypatch, capsys):
    from tandem.cli import main

    corpus_file = tmp_path / "c.jsonl"
    corpus_file.write_text("".join(json.dumps(d.to_dict()) + "\n" for d in corpus(5)))

    def fail(*_args, **_kwargs):
        raise enospc(tmp_path / "idx" / "somefile")

    monkeypatch.setattr("tandem.index.build._encode", fail)
    monkeypatch.setattr(sys, "argv", ["tandem", "index", "--corpus", str(corpus_file), "--kind", "bm25",
                                      "--out", str(tmp_path / "idx")])
    with pytest.raises(SystemExit) as code:
        main()
    err = " ".join(capsys.readouterr().err.split())
    assert code.value.code == 1 and "No space left on device" in err and "somefile" in err
    assert "internal error" not in err


# -- refused input leaves nothing ---------------------------------------------------------------

def test_a_duplicate_id_names_file_and_lines_and_leaves_no_work_folder(tmp_path):
    corpus_file = tmp_path / "corpus.jsonl"
    records = [d.to_dict() for d in corpus(30)]
    records[25] = {**records[25], "id": "p3"}
    corpus_file.write_text("".join(json.dumps(r) + "\n" for r in records))
    res = tandem("index", "--corpus", str(corpus_file), "--kind", "bm25", "--shard-size", "10",
                 "--out", str(tmp_path / "idx"))
    assert res.returncode == 2, res.stderr
    assert f"{corpus_file}:26: duplicate document id 'p3' (first at line 4)" in " ".join(res.stderr.split())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl"]  # no index, no work folder, no lock


def test_a_duplicate_id_in_memory_leaves_no_work_folder_either(tmp_path):
    docs = corpus(30)
    docs[25] = Document("p3", "x", "y")
    with pytest.raises(DataError, match="duplicate document id 'p3'"):
        build_index(iter(docs), tmp_path / "idx", kind="bm25", shard_size=10)
    assert list(tmp_path.iterdir()) == []
