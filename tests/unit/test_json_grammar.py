"""Relaxed schema decoding (:mod:`tandem.llm.json_grammar`): the writer's grammars admit exactly the
language of :func:`tandem.llm.structured.json_ebnf`, the relaxed one a superset, and the rest of a reply
from any point inside a relaxed string is exactly what the bounded grammar admits after that point."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace
from typing import Any

import pytest

from tandem.llm.json_grammar import LONG_STRING, Cursor, RelaxedPlan, is_long
from tandem.llm.structured import json_ebnf
from tandem.methods.cooprag import prompts as cooprag_prompts
from tandem.methods.dualrag import prompts as dualrag_prompts
from tandem.methods.genground import algorithm as genground
from tandem.methods.metarag import algorithm as metarag

xgrammar = pytest.importorskip("xgrammar")
from xgrammar.testing import _is_grammar_accept_string as accepts  # noqa: E402

ROLES = [dualrag_prompts.REASONER, dualrag_prompts.ENTITY_IDENTIFIER, dualrag_prompts.SUMMARIZER,
         cooprag_prompts.UNROLL, cooprag_prompts.COMPLETE, cooprag_prompts.ONE_CALL, genground.PLAN, genground.ASK, genground.GROUND,
         metarag.GENERATE, metarag.PSEUDO]
ALPHABET = "abc xyzé,:{}[]'-ü"


def _grammar(text: str) -> Any:
    return xgrammar.Grammar.from_ebnf(text)


def _instance(schema: dict[str, Any], rng: random.Random, over: str) -> Any:
    """A value of ``schema``; sometimes one past a bound: ``over`` "strings" for strings only, "all" for
    arrays and integers too, "" for none."""
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema["type"]
    if kind == "string":
        low, high = schema.get("minLength", 0), schema["maxLength"]
        n = rng.choice([low, high, rng.randint(low, high)] + ([high + 1, high + 3] if over else []))
        return "".join(rng.choice(ALPHABET) for _ in range(n))
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "integer":
        return rng.choice([schema["minimum"], schema["maximum"]] + ([schema["maximum"] + 1] if over == "all" else []))
    if kind == "object":
        return {key: _instance(sub, rng, over) for key, sub in schema["properties"].items()}
    low, high = schema.get("minItems", 0), schema["maxItems"]
    n = rng.choice([low, high, rng.randint(low, high)] + ([high + 1] if over == "all" else []))
    return [_instance(schema["items"], rng, over) for _ in range(n)]


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.name)
def test_the_writer_admits_json_ebnfs_language_and_the_rest_continues_it(role: Any) -> None:
    plan = RelaxedPlan.of(role.bounded)
    assert plan is not None
    reference, bounded, relaxed = (_grammar(g) for g in (json_ebnf(role.bounded), plan.bounded_grammar(), plan.grammar()))
    rng = random.Random(0)
    rests = 0
    for i in range(9):
        over = ("", "strings", "all")[i % 3]
        text = json.dumps(_instance(role.bounded, rng, over), ensure_ascii=False, separators=(",", ":"))
        valid = accepts(reference, text)
        assert accepts(bounded, text) == valid, text
        assert accepts(relaxed, text) or not valid, text
        if over == "all":  # a prefix past an array's bound is no state the decoding reaches
            continue
        data, cursor = text.encode(), plan.cursor()
        for k in range(len(data)):
            top = cursor.stack[-1] if cursor.stack else None
            if (top is not None and top.kind == "string" and not top.key and is_long(top.schema)
                    and data[k] & 0xC0 != 0x80 and rng.random() < 0.04):
                rest, bounded_rest = cursor.rest(), cursor.rest(relaxed=False)
                assert rest is not None and bounded_rest is not None
                assert accepts(_grammar(bounded_rest), data[k:].decode()) == valid, (text, k)
                assert accepts(_grammar(rest), data[k:].decode()) or not valid, (text, k)
                rests += 1
            if not cursor.feed(data[k:k + 1]):
                assert not valid  # a long string passed its bound
                break
    assert rests > 0


def test_the_cursor_stops_at_the_character_past_the_bound_counting_characters_not_bytes() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9},
                                               "s": {"type": "array", "maxItems": 2,
                                                     "items": {"type": "string", "maxLength": 30}}},
              "required": ["n", "s"], "additionalProperties": False}
    plan = RelaxedPlan.of(schema)
    assert plan is not None
    cursor = plan.cursor()
    assert cursor.feed('{"n":7,"s":["ok","'.encode())
    assert cursor.feed(("é" * 30).encode())  # 30 characters, 60 bytes: within the bound
    before = cursor.copy()
    assert not cursor.feed("é".encode())
    rest = before.rest()
    assert rest is not None and 'c{0, 0}' not in rest
    grammar = _grammar(rest)
    assert accepts(grammar, '"]}') and not accepts(grammar, 'x"]}') and not accepts(grammar, '","x"]}')  # 2 items at most


def test_integers_are_the_canonical_decimals_of_the_range() -> None:
    for low, high in [(0, 999), (1, 9), (5, 123), (10, 10), (0, 0), (7, 1000), (95, 205)]:
        schema = {"type": "object", "properties": {"i": {"type": "integer", "minimum": low, "maximum": high},
                                                   "s": {"type": "string", "maxLength": LONG_STRING + 1}},
                  "required": ["i", "s"], "additionalProperties": False}
        plan = RelaxedPlan.of(schema)
        assert plan is not None
        grammar = _grammar(plan.bounded_grammar())
        for n in [*range(0, 130), *range(190, 215), 999, 1000, 1001]:
            assert accepts(grammar, f'{{"i":{n},"s":""}}') == (low <= n <= high), (low, high, n)
        assert not accepts(grammar, '{"i":07,"s":""}')


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"type": "string", "maxLength": 10}}, "required": ["a"],
     "additionalProperties": False},  # no long string
    {"type": "object", "properties": {"a": {"type": "string", "maxLength": 300}, "b": {"type": "boolean"}},
     "required": ["a"], "additionalProperties": False},  # an optional property
    {"type": "object", "properties": {"a": {"type": "string", "maxLength": 300}, "x": {"type": "number"}},
     "required": ["a", "x"], "additionalProperties": False},  # a number
    {"type": "object", "properties": {"a": {"type": ["string", "null"], "maxLength": 300}}, "required": ["a"],
     "additionalProperties": False},  # a type union
])
def test_schemas_the_writer_does_not_cover_keep_the_bounded_grammar(schema: dict[str, Any]) -> None:
    assert RelaxedPlan.of(schema) is None


def test_rest_is_none_outside_a_relaxed_string() -> None:
    cursor = Cursor({"type": "object", "properties": {"a": {"type": "string", "maxLength": 300}}, "required": ["a"],
                     "additionalProperties": False})
    assert cursor.feed(b'{"a"') and cursor.rest() is None  # inside the key, before the value


class _Handle:
    def __init__(self, tokens: list[int]) -> None:
        self.tokens, self.cancelled = tokens, False

    def can_read(self) -> bool:
        return True

    def read(self) -> dict[int, Any]:
        return {0: SimpleNamespace(generated_ids=self.tokens)}

    def cancel(self) -> None:
        self.cancelled = True


def _engine(table: list[bytes]) -> Any:
    from tandem.llm.ov_worker import WorkerEngine

    engine = WorkerEngine(None, None, [0], table, "local")  # only what follow uses: no model
    engine._config = lambda params, grammar=None, max_tokens=None: (grammar, max_tokens)
    return engine


SCHEMA = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 30}}, "required": ["s"],
          "additionalProperties": False}


def _job(ids: list[int], plan: RelaxedPlan, max_tokens: int = 50) -> Any:
    from tandem.llm.ov_worker import Job, Params

    return Job(7, ids, Params(max_tokens, json_schema=SCHEMA, relaxed=True), cursor=plan.cursor(), relaxed=True)


def test_the_engine_continues_from_the_token_before_the_bound() -> None:
    engine = _engine([b'{"s":"', b"x" * 10, b"x" * 12])
    plan = RelaxedPlan.of(SCHEMA)
    assert plan is not None
    job = _job([1, 2], plan)
    job.handle = _Handle([0, 1, 1, 2])  # 10 + 10 characters fit, 12 more pass 30
    assert engine.follow(job) and job.handle.cancelled and job.continuations == 1
    assert job.kept == [0, 1, 1] and engine.pending == [job]
    grammar, budget = job.config
    assert budget == 47 and "c{0, 10}" in grammar  # the rest: at most 10 more characters


def test_a_budget_that_ends_at_the_bound_ends_the_reply_there() -> None:
    engine = _engine([b'{"s":"', b"x" * 10, b"x" * 12])
    plan = RelaxedPlan.of(SCHEMA)
    assert plan is not None
    job = _job([1], plan, max_tokens=3)
    job.handle = _Handle([0, 1, 1, 2])
    assert engine.follow(job) and engine.pending == []
    (message,) = engine.finished
    assert message[:4] == ("done", 7, [0, 1, 1], "LENGTH") and message[4].relaxed


def test_a_reply_the_cursor_cannot_follow_is_decoded_again_under_the_bounded_grammar() -> None:
    engine = _engine([b'{"s":"', b'"}}}}'])  # closes more than was opened
    plan = RelaxedPlan.of(SCHEMA)
    assert plan is not None
    job = _job([1], plan)
    job.handle = _Handle([0, 1])
    assert engine.follow(job)
    assert job.cursor is None and job.kept == [] and job.config == (None, None)  # bounded, from the start


def test_a_cancelled_request_leaves_the_batch_without_a_reply() -> None:
    from tandem.llm.ov_worker import Job, Params

    engine = _engine([b"x"])
    running, other, waiting = Job(1, [1], Params(5)), Job(2, [1], Params(5)), Job(1, [2], Params(5))
    running.handle, other.handle = _Handle([0]), _Handle([0])
    engine.jobs = {10: running, 11: other}
    engine.pending = [waiting]  # a continuation of the same request
    engine.finished = [("done", 1, [0], "LENGTH", None), ("done", 2, [0], "LENGTH", None)]
    engine.cancel(1)
    assert running.handle.cancelled and not other.handle.cancelled
    assert engine.jobs == {11: other} and engine.pending == [] and [m[1] for m in engine.finished] == [2]
    alone = _engine([b"x"])
    alone.pending = [Job(3, [1], Params(5))]  # a continuation: its first attempt was cancelled in the pipeline
    alone.cancel(3)
    assert alone.pending == [] and alone.busy  # one more step frees the attempt's blocks


def test_a_stop_string_across_tokens_ends_the_reply_at_the_token_that_completes_it() -> None:
    from tandem.llm.ov_worker import Params

    engine = _engine([b"Par", b"is\n", b"\nmore", b"x"])
    engine.submit(5, [1], Params(20, stop=("\n\n",)))
    (job,) = engine.pending
    assert job.stops == (b"\n\n",) and job.config == (None, None)  # not left to OpenVINO's sampler
    job.handle = _Handle([0, 1])
    assert not engine.watch(job) and job.current == [0, 1]  # one newline so far
    job.handle = _Handle([2, 3])
    assert engine.watch(job) and job.handle.cancelled and engine.busy
    (message,) = engine.finished
    assert message[:4] == ("done", 5, [0, 1, 2], "STOP")


def test_a_relaxed_json_reply_ends_at_its_stop_string() -> None:
    engine = _engine([b'{"s":"', b"ab", b'"}\n', b"\n", b"x"])
    plan = RelaxedPlan.of(SCHEMA)
    assert plan is not None
    job = _job([1], plan)
    job.stops = (b"\n\n",)
    job.handle = _Handle([0, 1, 2, 3, 4])
    assert engine.follow(job) and engine.pending == []
    (message,) = engine.finished
    assert message[:4] == ("done", 7, [0, 1, 2, 3], "STOP")


class _Config:
    pass


def test_openvino_looks_for_stop_strings_only_without_token_bytes() -> None:
    from tandem.llm.ov_worker import Params, WorkerEngine

    ovg = SimpleNamespace(GenerationConfig=_Config)
    engine = WorkerEngine(None, ovg, [0], None, "local")
    engine.submit(1, [1], Params(20, stop=("\n",)))
    (job,) = engine.pending
    assert job.stops == () and job.config.stop_strings == {"\n"}
    engine = WorkerEngine(None, ovg, [0], [b"x"], "local")
    engine.submit(1, [1], Params(20, stop=("\n", "")))  # an empty stop string stops nothing
    (job,) = engine.pending
    assert job.stops == (b"\n",) and not hasattr(job.config, "stop_strings")


class _Pipe:
    """A pipeline whose step hands each request its next scripted tokens and status."""

    def __init__(self) -> None:
        self.steps = 0

    def add_request(self, pid: int, ids: Any, config: Any) -> Any:
        return _Scripted()

    def step(self) -> None:
        self.steps += 1


class _Scripted(_Handle):
    script: list[tuple[list[int], str]] = []

    def __init__(self) -> None:
        super().__init__([])
        self.script = list(type(self).script)
        self.status = "RUNNING"

    def read(self) -> dict[int, Any]:
        self.tokens, self.status = self.script.pop(0)
        return super().read()

    def get_status(self) -> Any:
        return SimpleNamespace(name=self.status)

    def read_all(self) -> list[Any]:
        return []


def test_a_step_sends_a_stopped_reply_at_once_and_frees_it_at_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    from tandem.llm.ov_worker import Params, WorkerEngine

    monkeypatch.setattr(_Scripted, "script", [([0], "RUNNING"), ([1, 1, 0], "RUNNING")])
    engine = WorkerEngine(_Pipe(), SimpleNamespace(GenerationConfig=_Config), [9], [b"a", b"\n"], "local")
    engine.submit(4, [1], Params(20, stop=("\n\n",)))
    assert engine.step() == [] and engine.busy
    ((kind, rid, tokens, status, _),) = engine.step()
    assert (kind, rid, tokens, status) == ("done", 4, [0, 1, 1], "STOP") and not engine.jobs
    assert engine.busy and engine.step() == [] and engine._pipe.steps == 3 and not engine.busy


def test_a_request_the_engine_ignores_is_an_error_not_an_empty_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    from tandem.llm.ov_worker import Params, WorkerEngine

    monkeypatch.setattr(_Scripted, "script", [([], "IGNORED")])
    engine = WorkerEngine(_Pipe(), SimpleNamespace(GenerationConfig=_Config), [9], [b"a", b"\n"], "local")
    engine.submit(4, [1], Params(20, stop=("\n",)))
    assert engine.step() == [("error", 4, "local: generation ended (IGNORED) without output")]
