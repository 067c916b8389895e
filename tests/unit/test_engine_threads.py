"""The OpenVINO engine's default thread count (tandem.llm.cpus.idle_cpus): CPUs busy right now,
not a trailing load average."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.llm import cpus


def fake_stat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before: list[int], after: list[int]) -> str:
    """A /proc/stat whose aggregate line reads ``before``, then ``after`` once the window has passed."""
    stat = tmp_path / "stat"
    stat.write_text("cpu " + " ".join(map(str, before)) + "\ncpu0 1 2 3 4\n")
    monkeypatch.setattr(cpus.time, "sleep", lambda _s: stat.write_text("cpu " + " ".join(map(str, after)) + "\n"))
    monkeypatch.setattr(cpus.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(cpus, "available_cpus", lambda: 2)
    monkeypatch.setattr(cpus.os, "getloadavg", lambda: (7.0, 7.0, 7.0))  # a trailing figure that must not win
    return str(stat)


def test_a_quiet_machine_gets_every_core_whatever_the_load_average(tmp_path, monkeypatch) -> None:
    # 100 jiffies pass on each of 2 CPUs; 195 of the 200 idle
    stat = fake_stat(tmp_path, monkeypatch, [10, 0, 10, 1000, 0, 0, 0, 0], [13, 0, 12, 1195, 0, 0, 0, 0])
    assert cpus.idle_cpus(stat=stat) == 2


def test_one_busy_core_leaves_one_thread(tmp_path, monkeypatch) -> None:
    # user 90 + system 10 of 200: one core busy, iowait counts as idle
    stat = fake_stat(tmp_path, monkeypatch, [0, 0, 0, 0, 0, 0, 0, 0], [90, 0, 10, 80, 20, 0, 0, 0])
    assert cpus.idle_cpus(stat=stat) == 1
    stat = fake_stat(tmp_path, monkeypatch, [0, 0, 0, 0, 0, 0, 0, 0], [90, 0, 10, 80, 20, 0, 0, 0])
    assert cpus.busy_cpus(stat=stat) == pytest.approx(1.0)


def test_falls_back_to_the_load_average_without_proc_stat(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(cpus, "available_cpus", lambda: 4)
    monkeypatch.setattr(cpus.os, "getloadavg", lambda: (2.6, 1.0, 1.0))
    monkeypatch.setattr(cpus.time, "sleep", lambda _s: None)
    assert cpus.busy_cpus(stat=str(tmp_path / "missing")) is None
    assert cpus.idle_cpus(stat=str(tmp_path / "missing")) == 1
