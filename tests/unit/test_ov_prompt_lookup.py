"""The engine worker under prompt lookup (``prompt_lookup=N``): replies are decoded with N drafted tokens a
step on the prompt-lookup pipeline, and first-token requests, which such a pipeline refuses (it runs no beam
search), go to a plain pipeline built at the first of them and stepped only while it has work."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.unit.ov_fakes import CountdownHandle


def _handle(config: Any) -> CountdownHandle:
    if config.num_beams:
        return CountdownHandle([SimpleNamespace(generated_ids=[7], score=-0.1), SimpleNamespace(generated_ids=[8], score=-2.5)])
    return CountdownHandle([SimpleNamespace(generated_ids=[5, 9])])


class _Pipe:
    """A pipeline that, like OpenVINO GenAI's prompt-lookup one, refuses requests without drafting."""

    def __init__(self, lookup: bool) -> None:
        self.lookup, self.steps, self.configs = lookup, 0, []

    def add_request(self, pid: int, ids: Any, config: Any) -> CountdownHandle:
        if self.lookup and not (config.num_assistant_tokens and config.max_ngram_size):
            raise RuntimeError("`max_ngram_size` && `num_assistant_tokens` should be specified")
        if not self.lookup and config.num_assistant_tokens:
            raise RuntimeError("assistant generation needs a draft or prompt lookup")
        self.configs.append(config)
        return _handle(config)

    def step(self) -> None:
        self.steps += 1


class _Config:
    num_assistant_tokens = max_ngram_size = num_beams = 0


def _engine(lookup: int) -> tuple[Any, list[_Pipe]]:
    from tandem.llm.ov_worker import WorkerEngine

    built: list[_Pipe] = []

    def beams() -> _Pipe:
        built.append(_Pipe(lookup=False))
        return built[-1]

    engine = WorkerEngine(_Pipe(lookup=lookup > 0), SimpleNamespace(GenerationConfig=_Config), [9], None, "local",
                          lookup=lookup, beams=beams)
    return engine, built


def _run(engine: Any) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    while engine.busy:
        out += engine.step()
    return out


def test_replies_draft_from_the_prompt_and_first_tokens_run_on_a_plain_pipeline_built_once() -> None:
    from tandem.llm.ov_worker import LOOKUP_NGRAM, Params

    engine, built = _engine(lookup=4)
    engine.submit(1, [1, 2, 3], Params(16))
    assert [reply[:4] for reply in _run(engine)] == [("done", 1, [5, 9], "FINISHED")]
    (config,) = engine._pipe.configs
    assert (config.num_assistant_tokens, config.max_ngram_size) == (4, LOOKUP_NGRAM)
    assert built == [] and engine._pipe.steps == 2  # no first-token request yet: no second pipeline
    engine.submit(2, [1, 2], Params(1, first_tokens=2))
    engine.submit(3, [1, 2], Params(1, first_tokens=2))
    replies = sorted(_run(engine))
    assert [reply[:4] for reply in replies] == [("done", 2, [(7, -0.1), (8, -2.5)], "TOP"),
                                                ("done", 3, [(7, -0.1), (8, -2.5)], "TOP")]
    assert len(built) == 1 and built[0].steps == 2 and len(built[0].configs) == 2
    assert all(c.num_beams == 2 and not c.num_assistant_tokens for c in built[0].configs)
    steps = built[0].steps
    engine.submit(4, [1], Params(8))
    _run(engine)
    assert built[0].steps == steps  # idle: the plain pipeline is not stepped for the drafting one's requests


def test_without_prompt_lookup_every_request_runs_on_the_one_pipeline() -> None:
    from tandem.llm.ov_worker import Params

    engine, built = _engine(lookup=0)
    engine.submit(1, [1, 2, 3], Params(16))
    engine.submit(2, [1, 2], Params(1, first_tokens=2))
    assert len(_run(engine)) == 2 and built == []
    assert [c.num_assistant_tokens for c in engine._pipe.configs] == [0, 0]


def test_a_first_tokens_pipeline_openvino_cannot_build_refuses_that_request_and_the_engine_goes_on() -> None:
    from tandem.llm.ov_worker import Params, WorkerEngine

    def beams() -> _Pipe:
        raise RuntimeError("out of memory while compiling")

    engine = WorkerEngine(_Pipe(lookup=True), SimpleNamespace(GenerationConfig=_Config), [9], None, "local",
                          lookup=4, beams=beams)
    engine.submit(1, [1, 2], Params(1, first_tokens=2))
    engine.submit(2, [1, 2, 3], Params(16))
    replies = sorted(_run(engine), key=lambda reply: reply[1])
    assert replies[0] == ("error", 1, "local: request refused: out of memory while compiling")
    assert replies[1][:4] == ("done", 2, [5, 9], "FINISHED")
