"""The prefix ledger (what an engine's prefix cache can serve) and the run-level reuse figures."""

from __future__ import annotations

import pytest

from tandem.eval.runner import prefix_reuse, summarize
from tandem.llm.base import LLMResponse
from tandem.llm.prefix_ledger import PrefixLedger, kv_block_capacity
from tandem.types import LLMCall, Step, Trace


def test_whole_blocks_of_a_prefix_seen_before_are_reusable_up_to_the_last_prompt_token():
    ledger = PrefixLedger(block_size=4)
    assert ledger.reusable(list(range(10))) == 0
    ledger.record(list(range(10)))  # blocks [0..3], [4..7]; the partial [8, 9] is not counted
    assert ledger.reusable(list(range(10))) == 8
    assert ledger.reusable(list(range(8))) == 7  # the last prompt token is always computed
    assert ledger.reusable([0, 1, 2, 3, 4, 5, 6, 99, 8]) == 4  # reuse stops at the first block that differs
    assert ledger.reusable([9, 1, 2, 3, 4, 5, 6, 7]) == 0  # a block counts only with its whole prefix
    assert ledger.reusable([]) == 0 and len(ledger) == 2


def test_the_least_recently_used_blocks_go_when_the_cache_is_full():
    ledger = PrefixLedger(block_size=2, capacity=3)
    ledger.record([1, 2, 3, 4])  # 2 blocks
    ledger.record([7, 8])  # 3 blocks
    assert ledger.reusable([1, 2, 3, 4, 0]) == 4  # uses them: [7, 8] is now the oldest
    ledger.record([5, 6])
    assert ledger.reusable([7, 8, 0]) == 0 and ledger.reusable([1, 2, 3, 4, 0]) == 4 and len(ledger) == 3
    ledger.clear()
    assert ledger.reusable([1, 2, 3, 4, 0]) == 0
    with pytest.raises(ValueError, match="block_size"):
        PrefixLedger(block_size=0)


def test_the_blocks_running_requests_hold_leave_the_cache_less_room():
    ledger = PrefixLedger(block_size=2, capacity=4)
    ledger.record([1, 2, 3, 4, 5, 6])  # 3 blocks
    with ledger.holding(3) as held:  # a running request: 3 new slots = 2 blocks, so 2 are left to the cache
        assert held == 2 and len(ledger) == 2 and ledger.reusable([1, 2, 3, 4, 0]) == 0  # the oldest went first
        assert ledger.reusable([3, 4]) == 0  # a block counts only with its whole prefix
        ledger.record([7, 8, 9, 10])
        assert len(ledger) == 2
    ledger.record([11, 12, 13, 14])  # ended: the cache has its whole room again
    assert len(ledger) == 4 and ledger.reusable([7, 8, 9, 10, 0]) == 4
    with pytest.raises(RuntimeError, match="killed"), ledger.holding(100):  # a failed request gives its blocks back
        assert len(ledger) == 0
        raise RuntimeError("killed")
    ledger.record([1, 2, 3, 4])
    assert ledger.reusable([1, 2, 3, 4, 0]) == 4


def test_kv_block_capacity_from_a_transformers_config():
    qwen_15b = {"num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2, "hidden_size": 1536}
    # 28 layers x (K and V) x 2 heads x 128 values x 1 byte (u8) x 32 tokens = 458,752 bytes a block
    assert kv_block_capacity(qwen_15b, 1, 1) == 2**30 // 458_752
    assert kv_block_capacity({"hidden_size": 8}, 1, 1) is None


def _record(role_tokens: list[tuple[str, int, int]]) -> dict:
    step = Step("s", llm_calls=[LLMCall(role, (), "x", prompt_tokens=p, reused_tokens=r) for role, p, r in role_tokens])
    trace = Trace(steps=[step])
    return {"id": "q", "scores": {"em": 1.0}, "gold_doc_recall": None, "llm_calls": 1, "tokens": 1, "seconds": 1.0,
            "reuse": trace.reuse()}


def test_a_run_reports_the_share_of_prompt_tokens_reused_per_role():
    rows = [_record([("reasoner", 100, 90), ("summarizer", 400, 100), ("reasoner:repair", 100, 60)]),
            _record([("summarizer", 600, 0)])]
    replayed = Trace(steps=[Step("s", llm_calls=[LLMCall("answer", (), "x", prompt_tokens=50, cached=True)])])
    assert replayed.reuse() == {}  # a reply from the response cache: no engine computed its prompt
    metrics = summarize(rows)
    assert metrics["reused_token_share"] == pytest.approx(250 / 1200)
    assert metrics["reuse"]["reasoner"] == {"prompt_tokens": 200, "reused_tokens": 150, "share": 0.75}
    assert metrics["reuse"]["summarizer"]["share"] == 0.1
    assert prefix_reuse([{"answer": {"prompt_tokens": 10, "reused_tokens": 0}}]) == {}  # a backend without a cache
    assert LLMResponse.from_dict(LLMResponse("a", 5, 1, 0.1, "stop", "m", reused_tokens=4).to_dict()).reused_tokens == 4
    assert LLMCall("r", (), "x", reused_tokens=3).to_dict()["reused_tokens"] == 3
    assert "reused_tokens" not in LLMCall("r", (), "x").to_dict()  # traces without reuse stay as they were


def test_an_answers_cost_and_the_openai_usage_carry_the_reused_tokens():
    from tandem.server.payloads import answer_payload
    from tandem.server.schemas import Cost, Usage
    from tandem.server.streaming import usage
    from tandem.types import Answer

    calls = [LLMCall("reasoner", (), "x", prompt_tokens=300, completion_tokens=5, reused_tokens=256),
             LLMCall("answer", (), "y", prompt_tokens=100, completion_tokens=2)]
    result = answer_payload(Answer("q", "Warsaw", Trace(steps=[Step("s", llm_calls=calls)])), None, "dualrag", 1.0)
    assert Cost(**result["cost"]).reused_tokens == 256
    assert Usage(**usage(result)).prompt_tokens_details.cached_tokens == 256
    assert usage(result)["prompt_tokens"] == 400 and usage(result)["total_tokens"] == 407


def test_a_reply_of_an_engine_replaced_meanwhile_is_not_recorded():
    ledger = PrefixLedger(block_size=2)
    epoch = ledger.epoch
    ledger.clear()  # the engine process was replaced while the request ran
    ledger.record([1, 2, 3, 4], epoch)
    assert ledger.reusable([1, 2, 3, 4, 5]) == 0
    ledger.record([1, 2, 3, 4], ledger.epoch)
    assert ledger.reusable([1, 2, 3, 4, 5]) == 4


def test_replayed_replies_and_odd_server_counts_report_no_reuse(tmp_path):
    from tandem.llm.base import LLMRequest
    from tandem.llm.cache import CachedLLM
    from tandem.llm.openai_compat import _cached_tokens

    class Reusing:
        spec, name = "fake:reuse", "reuse"

        def complete(self, req):
            return LLMResponse("a", 10, 1, 0.1, "stop", "reuse", reused_tokens=8)

    llm = CachedLLM(Reusing(), tmp_path / "c.sqlite")
    req = LLMRequest.from_prompt("q", max_tokens=4)
    assert llm.complete(req).reused_tokens == 8 and llm.complete(req).reused_tokens == 0  # the replay computed nothing
    assert _cached_tokens({"prompt_tokens_details": {"cached_tokens": "x"}}) == 0
    assert _cached_tokens({"prompt_tokens_details": None}) == 0 and _cached_tokens({}) == 0
    assert _cached_tokens({"prompt_tokens_details": {"cached_tokens": 7}}) == 7
