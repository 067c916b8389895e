"""benchmarks/step_log.py: the engine's step log read per part of a run."""

from __future__ import annotations

import sys

import pytest
from tests.conftest import benchmark_script


def run(monkeypatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", ["step_log.py", *argv])
    benchmark_script("step_log").main()


def test_parts_show_slower_steps_and_longer_gaps(tmp_path, monkeypatch, capsys):
    log, t, lines = tmp_path / "steps.tsv", 1000.0, []
    for i in range(40):  # the second half: steps twice as slow and a 1 s gap before each
        seconds, gap = (0.5, 0.0) if i < 20 else (1.0, 1.0)
        t += gap + seconds
        lines.append(f"{t:.3f}\t2\t0\t{seconds}\t{10 + i}\t1073479680\t2")
    log.write_text("\n".join(lines) + "\n")
    run(monkeypatch, str(log), "--parts", "2")
    out = capsys.readouterr().out
    first, second = [row for row in out.splitlines() if row.startswith(("| 1 |", "| 2 |"))]
    assert first.split("|")[6].strip() == "0.500" and second.split("|")[6].strip() == "1.000"
    assert first.split("|")[8].strip() == "1.00" and second.split("|")[8].strip() == "0.50"
    assert second.split("|")[9].strip() == "1.000"


def test_a_damaged_line_is_named(tmp_path, monkeypatch):
    log = tmp_path / "steps.tsv"
    log.write_text("1000.0\t1\t0\t0.5\t3\t1\t1\n1001.0\tx\n")
    with pytest.raises(SystemExit, match=r"steps.tsv:2: not a step-log line"):
        run(monkeypatch, str(log))
