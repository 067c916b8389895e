"""benchmarks/llm_work.py: the tokens a never-evicting, block-matching prefix cache leaves to prefill."""

from __future__ import annotations

import json

import pytest
from tests.conftest import benchmark_script

work = benchmark_script("llm_work")


def test_only_whole_shared_blocks_are_cached() -> None:
    role = list(range(100, 110))                       # a role's instructions: 10 tokens
    first = role + [1, 2, 3]
    second = role + [1, 9, 9, 9]                       # shares 11 tokens with the first: 2 whole blocks
    third = [7] + role                                 # shares nothing: prefixes, not substrings
    assert list(work.to_prefill([first, second, third], block=4)) == [13, 14 - 8, 11]
    # block 1: every shared token counts
    assert list(work.to_prefill([first, second], block=1)) == [13, 14 - 11]


def test_a_prompt_seen_before_is_cached_up_to_its_last_whole_block() -> None:
    prompt = list(range(10))
    assert list(work.to_prefill([prompt, prompt, prompt + [5]], block=4)) == [10, 2, 3]


def test_a_block_after_a_miss_never_hits() -> None:
    a = [1] * 4 + [2] * 4 + [3] * 4
    b = [1] * 4 + [9] * 4 + [3] * 4                    # its third block equals a's, after a miss
    assert list(work.to_prefill([a, b], block=4)) == [12, 8]


def test_bad_block_and_bad_runs_are_named(tmp_path) -> None:
    with pytest.raises(ValueError, match="block must be >= 1"):
        list(work.to_prefill([[1]], block=0))
    with pytest.raises(SystemExit, match="no predictions.jsonl"):
        work.calls_of(tmp_path)
    (tmp_path / "predictions.jsonl").write_text(json.dumps({"trace": {"steps": []}}) + "\n{broken\n")
    with pytest.raises(SystemExit, match=r"predictions.jsonl:2: not JSON"):
        work.calls_of(tmp_path)


def test_the_fit_recovers_per_token_costs() -> None:
    rows = [(p, d, 0.005 * p + 0.04 * d + 0.1) for p, d in [(100, 10), (900, 50), (2000, 5), (40, 80), (500, 20)]]
    rates = work.fit(rows)
    assert rates["s_per_prefilled_token"] == pytest.approx(0.005)
    assert rates["s_per_decoded_token"] == pytest.approx(0.04)
    assert work.fit(rows[:3]) is None
