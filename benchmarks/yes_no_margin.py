"""How well the 1.5B's first-token probabilities tell yes from no, on the recorded NativeRAG prompts.

    python benchmarks/yes_no_margin.py RUN --questions 250:375 [--threshold T]

RUN is a NativeRAG run of the 1.5B (`instruction_yes_no` answer style) over dev500; the questions are those
at dataset positions START:END that ask yes or no. For each, the recorded answer prompt goes through the
1.5B and the margin log P(yes) - log P(no) of the reply's first token is taken ("Yes", "yes", " Yes", " yes"
against the same forms of no): ``--engine torch`` from the transformers model's logits (the GGUF converted
once by ``tandem.llm.convert``; bf16), ``--engine openvino`` from the default engine's model (bf16, u8 KV)
by beam search with four beams and one new token, whose four sequences are the four likeliest first tokens
with their log-probabilities (a form outside those four counts as absent). One thread. Printed: each
question's gold answer, margin and recorded prediction; the ROC AUC of the margin (scipy's Mann-Whitney U);
right answers at margin thresholds 0-4 in steps of 0.25, or at ``--threshold`` only (to check a threshold
chosen on other questions, with the paired 95 % bootstrap interval of its right answers minus the run's);
and the run's own right answers. Margins are kept in ``--keep`` (default ``runs/yes-no-margin``).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


YES, NO = ("Yes", "yes", " Yes", " yes"), ("No", "no", " No", " no")


def torch_margins() -> Callable[[list[dict]], float]:
    """The margin from the transformers model's first-token logits."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tandem.llm.convert import ensure_converted

    torch.set_num_threads(1)
    path = ensure_converted("qwen2.5-coder-1.5b")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.bfloat16).eval()
    yes, no = ([tokenizer.encode(w)[0] for w in forms] for forms in (YES, NO))

    def margin(messages: list[dict]) -> float:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        with torch.no_grad():
            logp = torch.log_softmax(model(tokenizer(text, return_tensors="pt").input_ids).logits[0, -1].float(), -1)
        return (torch.logsumexp(logp[yes], 0) - torch.logsumexp(logp[no], 0)).item()

    return margin


def openvino_margins() -> Callable[[list[dict]], float]:
    """The margin from the default engine's four likeliest first tokens (beam search, 4 beams, 1 token)."""
    import openvino_genai as ovg

    from tandem.llm.ladder import DEFAULT_MODEL
    from tandem.llm.local import load_local

    engine = load_local(DEFAULT_MODEL, num_threads=1)  # prepares the model as a plain `local` run does
    path = engine.path
    engine.close()
    scheduler = ovg.SchedulerConfig()
    scheduler.cache_size, scheduler.max_num_seqs, scheduler.max_num_batched_tokens = 1, 8, 512
    pipe = ovg.ContinuousBatchingPipeline(path, scheduler, "CPU", {
        "INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "bf16", "KV_CACHE_PRECISION": "u8",
        "CACHE_DIR": str(Path(path) / "compiled")})
    tokenizer = pipe.get_tokenizer()
    config = ovg.GenerationConfig()
    config.max_new_tokens, config.num_beams, config.num_return_sequences = 1, 4, 4

    def margin(messages: list[dict]) -> float:
        ids = tokenizer.encode(tokenizer.apply_chat_template(messages, add_generation_prompt=True)).input_ids
        handle = pipe.add_request(0, ids, config)
        while handle.get_status() == ovg.GenerationStatus.RUNNING:
            pipe.step()
        top = {tokenizer.decode([int(out.generated_ids[0])]): out.score for out in handle.read_all()}
        yes, no = ([top[w] for w in forms if w in top] for forms in (YES, NO))
        return logsumexp(yes) - logsumexp(no)

    return margin


def logsumexp(values: list[float]) -> float:
    """log(sum(exp(v))); -inf for none (a form outside the four likeliest)."""
    return math.log(sum(math.exp(v) for v in values)) if values else -math.inf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    parser.add_argument("--questions", default="250:375", help="dataset positions START:END")
    parser.add_argument("--threshold", type=float, default=None)
    parser.add_argument("--engine", choices=("torch", "openvino"), default="torch")
    parser.add_argument("--keep", type=Path, default=ROOT / "runs" / "yes-no-margin")
    args = parser.parse_args()

    from scipy.stats import mannwhitneyu

    from tandem.eval.intervals import paired_difference
    from yes_no_prompts import yes_no_records  # benchmarks/, beside this script

    start, end, records = yes_no_records(args.run, args.questions)
    margin_of = torch_margins() if args.engine == "torch" else openvino_margins()
    rows = []
    for record in records:
        margin = margin_of(record["trace"]["steps"][-1]["llm_calls"][0]["messages"])
        rows.append({"id": record["id"], "gold": record["golden_answers"][0].lower(), "margin": margin,
                     "prediction": record["prediction"]})
        print(f"{rows[-1]['gold']:>3} {margin:+.2f} {record['prediction']}", flush=True)
    args.keep.mkdir(parents=True, exist_ok=True)
    (args.keep / f"{args.engine}-{start}-{end}.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    golds_yes = [r["margin"] for r in rows if r["gold"] == "yes"]
    golds_no = [r["margin"] for r in rows if r["gold"] == "no"]
    if golds_yes and golds_no:
        auc = mannwhitneyu(golds_yes, golds_no).statistic / (len(golds_yes) * len(golds_no))
        print(f"AUC {auc:.3f} ({len(golds_yes)} yes, {len(golds_no)} no)")
    thresholds = [args.threshold] if args.threshold is not None else [t / 4 for t in range(17)]
    greedy = {r["id"]: float(r["prediction"].strip().lower().startswith(r["gold"])) for r in rows}
    for threshold in thresholds:
        by_margin = {r["id"]: float((r["margin"] > threshold) == (r["gold"] == "yes")) for r in rows}
        line = f"threshold {threshold:+.3f}: right {sum(by_margin.values()):.0f}/{len(rows)}"
        if args.threshold is not None:
            diff, low, high = paired_difference(by_margin, greedy)
            line += f", minus the run's answers {diff:+.3f} [{low:+.3f}, {high:+.3f}]"
        print(line)
    print(f"the run's answers: right {sum(greedy.values()):.0f}/{len(rows)}")


if __name__ == "__main__":
    main()
