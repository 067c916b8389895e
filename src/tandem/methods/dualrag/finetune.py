"""DualRAG-FT: LoRA fine-tuning of the DualRAG roles on chat data (paper §3.2, methods.md §3.8).

The data is a ``tandem export sft`` folder: ``ROLE.jsonl`` files whose lines are
``{"messages": [<prompt messages>, {"role": "assistant", "content": <reply>}]}``. Each example is
rendered with the base tokenizer's chat template; the loss is the causal-LM loss on the final reply
only (its tokens and the template's end-of-turn), the prompt tokens are masked (label -100).

- ``mode="merged"``: one LoRA over the examples of all selected roles -> one model in ``out``.
- ``mode="per-role"``: one LoRA per role, each from the base model -> ``out/ROLE/``.

Training: AdamW, linear warm-up then a constant rate, gradient clipping, gradient accumulation over
single unpadded examples (``batch_size`` examples per optimizer step; the loss is the mean over the
batch's target tokens). The data order of epoch ``e`` is a shuffle seeded with ``seed + e``, so the
data position is the step count. Every ``save_every`` steps (and at a stop) ``checkpoint/`` is
replaced atomically with the adapter, the optimizer and scheduler state, the step, torch's RNG and the
log; running the same command again continues from it. At the end (or at the time cap) the LoRA is
merged into the base weights and the model + tokenizer are written into the folder, which then loads
as ``hf:FOLDER``; ``sft.json`` (written last) describes the base model, data, settings, steps and losses.
:func:`run_training` is ``tandem train sft`` (its settings: :class:`tandem.methods.dualrag.trainer.SFTRun`).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tandem.errors import ConfigError, DataError
from tandem.io import atomic_path, read_jsonl, write_json_atomic
from tandem.methods.dualrag.prompts import ROLES
from tandem.methods.dualrag.trainer import SFTRun, SFTSettings
from tandem.outdir import atomic_dir, claim_dir, recover_swap
from tandem.train.specs import backend_options
from tandem.train.state import TRAINER_FILE, load_trainer_state

SFT_FILE, CHECKPOINT_DIR, ADAPTER_DIR = "sft.json", "checkpoint", "adapter"
RUN_ONLY = ("max_steps", "max_minutes", "save_every")  # settings a resumed run may change
CHAT_ROLES = ("system", "user", "assistant")
OnStep = Callable[[int, int, float], None]


# -- data ----------------------------------------------------------------------------------------

@dataclass
class ChatExample:
    """One training conversation: the prompt messages and the final assistant reply (the target)."""

    role: str
    messages: list[dict[str, str]]
    source: str  # "path:line"


def _check_messages(record: Any, path: Path, line: int) -> list[dict[str, str]]:
    messages = record.get("messages") if isinstance(record, dict) else None
    if not isinstance(messages, list) or len(messages) < 2:
        raise DataError("expected {\"messages\": [...]} with at least one prompt message and the reply",
                        path=str(path), line=line)
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in CHAT_ROLES or not isinstance(m.get("content"), str):
            raise DataError(f"message {i} needs a role ({', '.join(CHAT_ROLES)}) and a string content",
                            path=str(path), line=line)
    if messages[-1]["role"] != "assistant":
        raise DataError("the last message must be the assistant's reply (the training target)",
                        path=str(path), line=line)
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def read_sft_data(data_dir: str | Path, roles: Sequence[str] = ROLES) -> dict[str, list[ChatExample]]:
    """The examples of each role in ``roles`` from ``data_dir/ROLE.jsonl``; a DataError naming the file
    (and line) for a missing folder or file, a malformed line, or no example at all."""
    folder = Path(data_dir)
    if not folder.is_dir():
        raise DataError(f"{folder} is not a folder: give a `tandem export sft` output folder", path=str(folder))
    data: dict[str, list[ChatExample]] = {}
    for role in roles:
        path = folder / f"{role}.jsonl"
        if not path.is_file():
            raise DataError(f"{folder} has no {path.name} (roles asked for: {', '.join(roles)}); "
                            "make the folder with `tandem export sft` or pick --roles", path=str(path))
        data[role] = [ChatExample(role, _check_messages(rec, path, line), f"{path}:{line}")
                      for line, rec in read_jsonl(path)]
    if not any(data.values()):
        raise DataError(f"{folder}: no training examples in {', '.join(f'{r}.jsonl' for r in roles)} "
                        "(export with a lower --threshold to keep more questions)", path=str(folder))
    return data


def _render(tokenizer: Any, messages: Sequence[Mapping[str, str]], generation_prompt: bool) -> str:
    if getattr(tokenizer, "chat_template", None):
        return str(tokenizer.apply_chat_template(list(messages), add_generation_prompt=generation_prompt,
                                                 tokenize=False))
    text = "\n\n".join(m["content"] for m in messages)  # base models: as HFLLM.encode_chat joins them
    return text + "\n\n" if generation_prompt else text


def encode_example(tokenizer: Any, messages: Sequence[Mapping[str, str]], eos_id: int) -> tuple[list[int], list[int]]:
    """(input ids, labels) of one conversation: labels are -100 on the prompt (the chat template with the
    generation prompt, exactly what generation sees) and the token ids on the final reply."""
    prompt = _render(tokenizer, messages[:-1], True)
    full = _render(tokenizer, messages, False)
    if getattr(tokenizer, "chat_template", None):
        if not full.startswith(prompt):
            raise ConfigError("the tokenizer's chat template does not render the reply after the generation "
                              "prompt; cannot mask the prompt")
        reply = tokenizer(full[len(prompt):], add_special_tokens=False)["input_ids"]
    else:
        reply = tokenizer(messages[-1]["content"], add_special_tokens=False)["input_ids"] + [eos_id]
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    return ids + reply, [-100] * len(ids) + reply


# -- training ------------------------------------------------------------------------------------

def _trainable(llm: Any) -> Any:
    if not hasattr(llm, "model") or not hasattr(llm, "tokenizer"):
        raise ConfigError(f"{getattr(llm, 'spec', llm)}: fine-tuning needs an in-process model (local | hf:PATH)")
    return llm


def _attach_lora(llm: Any, settings: SFTSettings) -> Any:
    from peft import LoraConfig, get_peft_model

    names = {name.rsplit(".", 1)[-1] for name, _ in llm.model.named_modules()}
    missing = sorted(set(settings.target_modules) - names)
    if missing:
        raise ConfigError(f"target_modules {missing} are not layers of {llm.spec}")
    torch.manual_seed(settings.seed)
    config = LoraConfig(r=settings.lora_r, lora_alpha=settings.lora_alpha, lora_dropout=settings.lora_dropout,
                        target_modules=list(settings.target_modules), task_type="CAUSAL_LM")
    return get_peft_model(llm.model, config)


def _model_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if k not in RUN_ONLY}


def read_sft_json(folder: str | Path) -> dict[str, Any] | None:
    """The ``sft.json`` of a model folder (None when there is none yet)."""
    path = Path(folder) / SFT_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _save_checkpoint(folder: Path, peft_model: Any, trainer: dict[str, Any]) -> None:
    with atomic_dir(folder / CHECKPOINT_DIR, "sft-checkpoint") as tmp:
        peft_model.save_pretrained(tmp / ADAPTER_DIR)
        torch.save(trainer, tmp / TRAINER_FILE)


def _save_model(folder: Path, peft_model: Any, tokenizer: Any) -> None:
    """Merge the LoRA into the base weights and put model + tokenizer files into ``folder`` (each file
    renamed into place from a finished temp folder)."""
    merged = peft_model.merge_and_unload()
    with atomic_path(folder / ".model", folder=True, place=_move_files) as tmp:
        merged.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)


def _move_files(tmp: Path, target: Path) -> None:
    for path in sorted(tmp.iterdir()):
        os.replace(path, target.parent / path.name)
    tmp.rmdir()


def _same_path(a: str, b: str) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def _targets(labels: torch.Tensor) -> int:
    """Tokens the loss is taken on (transformers shifts the labels: position 0 is never a target)."""
    return int((labels[0, 1:] >= 0).sum())


def reply_loss(model: Any, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the reply (the labelled tail of ``labels``, shape ``[1, n]``);
    the LM head runs only from the last prompt position on (``logits_to_keep``), not over the prompt."""
    first = max(1, int((labels[0] >= 0).nonzero()[0]))
    logits = model(input_ids=ids, logits_to_keep=ids.shape[1] - first + 1).logits[0, :-1]
    return torch.nn.functional.cross_entropy(logits.float(), labels[0, first:], ignore_index=-100)


def _batches(n: int, batch_size: int, seed: int, step: int) -> list[int]:
    """Example indices of optimizer step ``step`` (0-based): epoch e is a shuffle seeded with seed + e."""
    per_epoch = -(-n // batch_size)
    epoch, at = divmod(step, per_epoch)
    order = list(range(n))
    random.Random(seed + epoch).shuffle(order)
    return order[at * batch_size:(at + 1) * batch_size]


def train_model(llm: Any, examples: Sequence[ChatExample], out: str | Path, settings: SFTSettings, *,
                data: str = "", on_step: OnStep | None = None) -> dict[str, Any]:
    """LoRA-tune ``llm`` (an in-process HF model; it is modified) on ``examples`` into the model folder
    ``out``, continuing from ``out/checkpoint`` when it holds a run with the same settings.
    ``on_step(step, total, loss)`` after each optimizer step. Returns the ``sft.json`` record."""
    llm, out = _trainable(llm), Path(out)
    claim_dir(out, "sft-model")
    recover_swap(out / CHECKPOINT_DIR)
    eos = int(llm.eos_token_ids[0])
    encoded, too_long = [], 0
    for ex in examples:
        ids, labels = encode_example(llm.tokenizer, ex.messages, eos)
        if len(ids) > settings.max_length:
            too_long += 1
        else:
            encoded.append((torch.tensor([ids]), torch.tensor([labels])))
    if not encoded:
        raise DataError(f"no example fits max_length={settings.max_length} tokens ({too_long} longer)", path=data)
    per_epoch = -(-len(encoded) // settings.batch_size)
    planned = per_epoch * settings.epochs
    total = min(planned, settings.max_steps) if settings.max_steps else planned
    done = read_sft_json(out)
    if (done and done.get("finished") and done["steps"] >= total
            and _model_settings(done["settings"]) == _model_settings(settings.to_dict())):
        return {**done, "already_finished": True}
    peft_model = _attach_lora(llm, settings)
    params = [p for p in peft_model.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)
    warm = max(1, int(settings.warmup * planned))
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: min(1.0, (s + 1) / warm))
    log: dict[str, Any]
    state = load_trainer_state(out / CHECKPOINT_DIR)
    if state is not None:
        if _model_settings(state["settings"]) != _model_settings(settings.to_dict()) or not _same_path(state["data"], data):
            raise ConfigError(f"{out} holds a run with other settings or data; use another --out")
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        set_peft_model_state_dict(peft_model, load_file(str(out / CHECKPOINT_DIR / ADAPTER_DIR / "adapter_model.safetensors")))
        optim.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        step, log = int(state["step"]), state["log"]
    else:
        step = 0
        log = {"base": llm.spec, "base_path": getattr(llm, "path", ""), "data": data,
               "roles": sorted({ex.role for ex in examples}), "examples": len(encoded), "skipped_too_long": too_long,
               "target_tokens": sum(_targets(lab) for _, lab in encoded), "settings": settings.to_dict(),
               "train_loss": [], "minutes": 0.0, "resumed_at": []}
    if step:
        log["resumed_at"].append(step)
    log["settings"] = settings.to_dict()

    def checkpoint() -> None:
        trainer = {"settings": settings.to_dict(), "data": data, "step": step, "optimizer": optim.state_dict(),
                   "scheduler": sched.state_dict(), "torch_rng": torch.get_rng_state(), "log": log}
        _save_checkpoint(out, peft_model, trainer)

    peft_model.train()
    start, spent, stopped = time.monotonic(), float(log["minutes"]), None
    while step < total:
        batch = [encoded[i] for i in _batches(len(encoded), settings.batch_size, settings.seed, step)]
        counts = [_targets(labels) for _, labels in batch]
        tokens = sum(counts)
        optim.zero_grad()
        loss_sum = 0.0
        for (ids, labels), n in zip(batch, counts, strict=True):
            loss = reply_loss(peft_model, ids, labels)
            (loss * n / tokens).backward()
            loss_sum += loss.item() * n
        torch.nn.utils.clip_grad_norm_(params, settings.clip)
        optim.step()
        sched.step()
        step += 1
        loss = loss_sum / max(1, tokens)
        log["train_loss"].append([step, round(loss, 4)])
        if on_step is not None:
            on_step(step, total, loss)
        log["minutes"] = round(spent + (time.monotonic() - start) / 60, 2)
        if log["minutes"] >= settings.max_minutes and step < total:
            stopped = f"time cap {settings.max_minutes} min reached at step {step} of {total}"
            break
        if step % settings.save_every == 0 and step < total:
            checkpoint()
    peft_model.eval()
    log.update(steps=step, planned_steps=total, epochs_done=round(step / per_epoch, 3), stopped_early=stopped,
               finished=step >= total)
    checkpoint()
    _save_model(out, peft_model, llm.tokenizer)
    write_json_atomic(out / SFT_FILE, log)
    return log


def train_sft(data_dir: str | Path, llm_spec: str, out: str | Path, settings: SFTSettings, *,
              llm_opts: Mapping[str, Any] | None = None,
              progress: Callable[[str], OnStep] | None = None) -> dict[str, Any]:
    """Fine-tune ``llm_spec`` on the ``export sft`` folder ``data_dir`` into ``out`` (see module doc);
    ``progress(label)`` gives the ``on_step`` of each model trained. Returns ``out/sft.json``'s record."""
    from tandem.llm import load_llm

    data = read_sft_data(data_dir, settings.roles)
    out = claim_dir(out, "sft-model")
    source = str(Path(data_dir).resolve())
    if settings.mode == "merged":
        examples = [ex for role in settings.roles for ex in data[role]]
        on_step = progress("sft " + "+".join(settings.roles)) if progress else None
        return train_model(load_llm(llm_spec, **dict(llm_opts or {})), examples, out, settings, data=source,
                           on_step=on_step)
    logs: dict[str, Any] = {}
    for role in settings.roles:
        if not data[role]:
            logs[role] = {"skipped": f"no examples in {role}.jsonl"}
            continue
        on_step = progress(f"sft {role}") if progress else None
        logs[role] = train_model(load_llm(llm_spec, **dict(llm_opts or {})), data[role], out / role, settings,
                                 data=source, on_step=on_step)
    summary = {"base": llm_spec, "data": source, "mode": "per-role", "settings": settings.to_dict(),
               "finished": all(log.get("finished", True) for log in logs.values()),
               "roles": {role: {k: v for k, v in log.items() if k != "train_loss"} for role, log in logs.items()}}
    write_json_atomic(out / SFT_FILE, summary)
    return summary


def run_training(spec: SFTRun, out: str | Path, on_step: OnStep | None = None) -> dict[str, Any]:
    """``tandem train sft``: :func:`train_sft` of ``spec``'s data and base model (``--llm-opt`` backend options
    only) into ``out``; ``on_step(step, total, loss)`` after each optimizer step of each model trained. Returns the
    ``sft.json`` record."""
    llm_opts = backend_options(spec.llm, spec.llm_options)
    progress = (lambda _label: on_step) if on_step is not None else None
    return train_sft(spec.data, spec.llm, out, spec.hyper(), llm_opts=llm_opts, progress=progress)
