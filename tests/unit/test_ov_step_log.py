"""The engine worker's step log (``$TANDEM_OV_STEP_LOG``): one line per engine step, and a path that
cannot be opened costs a warning, not the engine."""

from __future__ import annotations

import contextlib
import io
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from tests.unit.ov_fakes import CountdownHandle


class _Pipe:
    def __init__(self) -> None:
        self.steps = 0

    def add_request(self, pid: int, ids: Any, config: Any) -> CountdownHandle:
        return CountdownHandle([SimpleNamespace(generated_ids=[5, 9])])

    def step(self) -> None:
        self.steps += 1

    def get_metrics(self) -> Any:
        return SimpleNamespace(cache_usage=12.5, kv_cache_size_in_bytes=4096)  # no scheduled_requests


class _Config:
    pass


def test_each_engine_step_writes_one_line_with_the_requests_and_the_pipelines_metrics() -> None:
    from tandem.llm.ov_worker import Params, WorkerEngine

    out = io.StringIO()
    engine = WorkerEngine(_Pipe(), SimpleNamespace(GenerationConfig=_Config), [9], None, "local", out)
    engine.submit(1, [1, 2, 3], Params(8))
    assert engine.step() == []
    ((kind, rid, tokens, status, _),) = engine.step()
    assert (kind, rid, tokens, status) == ("done", 1, [5, 9], "FINISHED")
    assert engine.step() == [] and engine._pipe.steps == 2  # nothing runs: no step, no line
    lines = [line.split("\t") for line in out.getvalue().splitlines()]
    assert len(lines) == 2 and all(len(fields) == 7 for fields in lines)
    assert [fields[1] for fields in lines] == ["1", "1"]  # one request running in each step
    assert all(float(fields[3]) >= 0 and fields[4:] == ["12.5", "4096", ""] for fields in lines)


def test_a_step_log_that_cannot_be_opened_is_a_warning_and_no_log(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    from tandem.llm.ov_worker import STEP_LOG_ENV, _open_step_log

    monkeypatch.setenv(STEP_LOG_ENV, str(tmp_path / "no-such-folder" / "steps.tsv"))
    with contextlib.ExitStack() as stack, caplog.at_level(logging.WARNING):
        assert _open_step_log(stack) is None
    assert "cannot open it" in caplog.text and "steps.tsv" in caplog.text
    monkeypatch.setenv(STEP_LOG_ENV, str(tmp_path / "steps.tsv"))
    with contextlib.ExitStack() as stack:
        handle = _open_step_log(stack)
        assert handle is not None and not handle.closed
    assert handle.closed  # closed with the worker's loop


class _FullDisk(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError(28, "No space left on device")


def test_a_step_log_that_cannot_be_written_ends_the_log_not_the_engine(caplog: pytest.LogCaptureFixture) -> None:
    from tandem.llm.ov_worker import Params, WorkerEngine

    engine = WorkerEngine(_Pipe(), SimpleNamespace(GenerationConfig=_Config), [9], None, "local", _FullDisk())
    engine.submit(1, [1, 2, 3], Params(8))
    with caplog.at_level(logging.WARNING):
        assert engine.step() == []
        ((kind, _, tokens, _, _),) = engine.step()
    assert (kind, tokens) == ("done", [5, 9]) and engine._step_log is None
    assert caplog.text.count("No space left on device") == 1
