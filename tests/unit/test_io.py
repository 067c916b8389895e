"""Atomic folder writes: a failed write leaves the old folder untouched; a good one replaces it."""

from __future__ import annotations

import pytest

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
