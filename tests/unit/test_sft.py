"""DualRAG-FT (``tandem train sft``): data checks, loss masking, resume, and a model that loads as hf:DIR."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from tandem.cli import app
from tandem.errors import DataError
from tandem.llm import load_llm
from tandem.llm.base import LLMRequest, Message
from tandem.llm.hf import HFLLM
from tandem.methods.dualrag.finetune import (
    SFTSettings,
    encode_example,
    read_sft_data,
    read_sft_json,
    reply_loss,
    train_model,
    train_sft,
)

SYSTEM = {"role": "system", "content": "You plan retrieval. Answer only in JSON."}


def chat(question: str, reply: str) -> dict:
    return {"messages": [SYSTEM, {"role": "user", "content": f"Question: {question}"},
                         {"role": "assistant", "content": reply}]}


EXAMPLES = [chat("Where was Marie Curie born?", '{"entities": ["Marie Curie"]}'),
            chat("Title search results?", '{"entities": ["Warsaw"]}'),
            chat("similarity answer only", '{"entities": []}')]


def write_data(folder, per_role: dict[str, list]) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    for role, rows in per_role.items():
        (folder / f"{role}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(folder)


def fresh(tiny_llm) -> HFLLM:
    """A new copy of the tiny model (training modifies the one it is given)."""
    return HFLLM(tiny_llm.path, num_threads=1)


def settings(**changes) -> SFTSettings:
    base = {"batch_size": 1, "lr": 5e-3, "lora_r": 4, "lora_alpha": 8, "save_every": 2, "roles": ["reasoner"]}
    return SFTSettings.from_dict({**base, **changes})


def test_loss_is_on_the_reply_only(tiny_llm):
    messages = EXAMPLES[0]["messages"]
    ids, labels = encode_example(tiny_llm.tokenizer, messages, tiny_llm.eos_token_ids[0])
    prompt = tiny_llm.encode_chat([Message(m["role"], m["content"]) for m in messages[:-1]])[0].tolist()
    assert ids[: len(prompt)] == prompt  # the prompt is exactly what generation sees
    assert labels[: len(prompt)] == [-100] * len(prompt)
    target = [t for t in labels if t != -100]
    assert target == ids[len(prompt):] and target
    assert tiny_llm.tokenizer.decode(target).startswith(messages[-1]["content"] + "<|im_end|>")


def test_training_changes_only_the_reply_loss_and_lowers_it(tiny_llm, tmp_path):
    llm = fresh(tiny_llm)
    data = read_sft_data(write_data(tmp_path / "d", {"reasoner": EXAMPLES}), ["reasoner"])["reasoner"]
    log = train_model(llm, data, tmp_path / "m", settings(epochs=6, lr=2e-2))
    losses = [loss for _, loss in log["train_loss"]]
    assert log["finished"] and log["steps"] == 18 and len(losses) == 18
    assert sum(losses[-3:]) < sum(losses[:3])  # the replies got likelier
    assert log["target_tokens"] == sum(sum(t != -100 for t in encode_example(
        tiny_llm.tokenizer, ex.messages, tiny_llm.eos_token_ids[0])[1][1:]) for ex in data)


def test_resume_after_a_crash_matches_an_uninterrupted_run(tiny_llm, tmp_path):
    folder = write_data(tmp_path / "d", {"reasoner": EXAMPLES})
    data = read_sft_data(folder, ["reasoner"])["reasoner"]
    straight = train_model(fresh(tiny_llm), data, tmp_path / "a", settings(epochs=2))

    def crash(step: int, total: int, loss: float) -> None:
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_model(fresh(tiny_llm), data, tmp_path / "b", settings(epochs=2), on_step=crash)
    assert read_sft_json(tmp_path / "b") is None  # no model yet, only the step-2 checkpoint
    resumed = train_model(fresh(tiny_llm), data, tmp_path / "b", settings(epochs=2))
    assert resumed["resumed_at"] == [2] and resumed["steps"] == straight["steps"] == 6
    assert resumed["train_loss"] == straight["train_loss"]  # optimizer, RNG and data position restored
    again = train_model(fresh(tiny_llm), data, tmp_path / "b", settings(epochs=2))
    assert again["already_finished"]
    a, b = HFLLM(str(tmp_path / "a")), HFLLM(str(tmp_path / "b"))
    for (name, pa), (_, pb) in zip(a.model.named_parameters(), b.model.named_parameters(), strict=True):
        assert torch.allclose(pa, pb, atol=1e-6), name


def test_model_folder_loads_as_hf_and_differs_from_the_base(tiny_llm, tmp_path):
    folder = write_data(tmp_path / "d", {"reasoner": EXAMPLES, "summarizer": EXAMPLES[:1]})
    s = settings(roles=["reasoner", "summarizer"], mode="per-role", epochs=2)
    summary = train_sft(folder, f"hf:{tiny_llm.path}", tmp_path / "m", s, llm_opts={"num_threads": 1})
    assert summary["finished"] and summary["roles"]["reasoner"]["steps"] == 6
    assert summary["roles"]["summarizer"]["steps"] == 2
    tuned = load_llm(f"hf:{tmp_path / 'm' / 'reasoner'}", num_threads=1)
    base = dict(tiny_llm.model.named_parameters())
    changed = [n for n, p in tuned.model.named_parameters() if not torch.equal(p, base[n])]
    assert changed and all("self_attn" in n for n in changed)  # LoRA merged into the attention weights only
    out = tuned.complete(LLMRequest(messages=(Message("user", "Question: Where?"),), max_tokens=5))
    assert out.completion_tokens >= 1
    assert read_sft_json(tmp_path / "m" / "summarizer")["roles"] == ["summarizer"]


@pytest.mark.parametrize(("text", "needle"), [
    ('{"messages": [{"role": "user", "content": "q"}]}\n', "at least one prompt message"),
    ('{"messages": [{"role": "user", "content": "q"}, {"role": "user", "content": "r"}]}\n', "assistant's reply"),
    ('{"messages": [{"role": "bot", "content": "q"}, {"role": "assistant", "content": "r"}]}\n', "message 0"),
    ("not json\n", ""),
])
def test_malformed_line_names_file_and_line(tmp_path, text, needle):
    good = json.dumps(EXAMPLES[0]) + "\n"
    (tmp_path / "reasoner.jsonl").write_text(good + text, encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_sft_data(tmp_path, ["reasoner"])
    assert err.value.line == 2 and "reasoner.jsonl" in str(err.value) and needle in str(err.value)


def test_empty_or_missing_data_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="not a folder"):
        read_sft_data(tmp_path / "nope")
    write_data(tmp_path / "d", {"reasoner": []})
    with pytest.raises(DataError, match="no summarizer.jsonl"):
        read_sft_data(tmp_path / "d", ["reasoner", "summarizer"])
    with pytest.raises(DataError, match="no training examples"):
        read_sft_data(tmp_path / "d", ["reasoner"])


def test_cli_reports_bad_data_and_finished_runs(tiny_llm, tmp_path):
    runner = CliRunner()
    bad = tmp_path / "bad"
    write_data(bad, {"reasoner": [EXAMPLES[0], {"messages": "x"}]})
    result = runner.invoke(app, ["train", "sft", str(bad), "--out", str(tmp_path / "m"), "--llm", f"hf:{tiny_llm.path}",
                                 "--roles", "reasoner"])
    assert isinstance(result.exception, DataError) and result.exception.line == 2
    assert not (tmp_path / "m" / "checkpoint").exists()  # refused before any work
    good = write_data(tmp_path / "good", {"reasoner": EXAMPLES[:2]})
    args = ["train", "sft", good, "--out", str(tmp_path / "m2"), "--llm", f"hf:{tiny_llm.path}", "--roles", "reasoner",
            "--batch-size", "1", "--lora-r", "2", "--llm-opt", "num_threads=1"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "2/2 steps" in first.output and "finished" in first.output
    second = runner.invoke(app, args)
    assert second.exit_code == 0 and "already finished" in second.output


def test_reply_loss_equals_the_masked_full_sequence_loss(tiny_llm):
    ids, labels = encode_example(tiny_llm.tokenizer, EXAMPLES[1]["messages"], tiny_llm.eos_token_ids[0])
    ids_t, labels_t = torch.tensor([ids]), torch.tensor([labels])
    with torch.no_grad():
        full = tiny_llm.model(input_ids=ids_t, labels=labels_t).loss
        assert torch.allclose(reply_loss(tiny_llm.model, ids_t, labels_t), full, atol=1e-5)
        unmasked = tiny_llm.model(input_ids=ids_t, labels=ids_t).loss
    assert not torch.allclose(full, unmasked)  # the prompt tokens would change it
