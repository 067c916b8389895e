"""Atomic writes (files and folders): a failed write leaves the old target untouched and no temp behind;
a good one replaces it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tandem.io import atomic_open, atomic_path
from tandem.outdir import atomic_dir


def test_atomic_dir_replaces_on_success_and_keeps_old_on_failure(tmp_path):
    out = tmp_path / "model"
    with atomic_dir(out, "model") as tmp:
        (tmp / "weights").write_text("v1")
    assert (out / "weights").read_text() == "v1"

    with pytest.raises(RuntimeError), atomic_dir(out, "model") as tmp:
        (tmp / "weights").write_text("half")
        raise RuntimeError("killed midway")
    assert (out / "weights").read_text() == "v1"

    with atomic_dir(out, "model") as tmp:
        (tmp / "weights").write_text("v2")
    assert (out / "weights").read_text() == "v2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temp or old folders left


def test_atomic_path_file_leaves_no_partial_file_when_the_writer_raises(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "out.txt"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("writer failed")
    assert sorted(p.name for p in target.parent.iterdir()) == []

    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_open(target) as handle:
        handle.write("half")
        raise RuntimeError("writer failed")
    assert target.read_text() == "old"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.txt"]

    with atomic_open(target) as handle:
        handle.write("new")
    assert target.read_text() == "new"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.txt"]


def test_atomic_path_folder_leaves_no_partial_folder_when_the_writer_raises(tmp_path: Path) -> None:
    target = tmp_path / "model"
    with pytest.raises(ValueError), atomic_path(target, folder=True) as tmp:
        assert tmp.is_dir() and tmp.parent == tmp_path and tmp.name.startswith(".model.")
        (tmp / "weights").write_text("half")
        raise ValueError("writer failed")
    assert list(tmp_path.iterdir()) == []

    with atomic_path(target, folder=True) as tmp:
        (tmp / "weights").write_text("v1")
    assert (target / "weights").read_text() == "v1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_atomic_path_place_may_keep_an_existing_target_and_the_temp_is_removed(tmp_path: Path) -> None:
    target = tmp_path / "model"
    target.mkdir()
    (target / "weights").write_text("winner")

    def keep_existing(tmp: Path, dest: Path) -> None:
        assert dest.is_dir()  # a concurrent writer got there first: nothing to do

    with atomic_path(target, folder=True, place=keep_existing) as tmp:
        (tmp / "weights").write_text("loser")
    assert (target / "weights").read_text() == "winner"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_atomic_path_named_temp_must_be_new(tmp_path: Path) -> None:
    (tmp_path / ".x.building").mkdir()
    with pytest.raises(FileExistsError), atomic_path(tmp_path / "x", folder=True, tmp_name=".x.building"):
        pass
    assert (tmp_path / ".x.building").is_dir()  # someone else's: not removed
    assert os.listdir(tmp_path) == [".x.building"]
