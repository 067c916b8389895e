"""Speculative decoding on the OpenVINO engine: a model alone against the same model with a smaller draft
(OpenVINO GenAI's ``draft_model`` in the continuous-batching pipeline), or with drafts looked up in the
prompt itself (``--lookup``: prompt-lookup decoding, the next tokens copied from where the last n-gram
occurred in the prompt), greedy, on a few prompts. Prints one JSON line per setting: seconds, tokens,
tok/s and the replies (the same replies are the condition).

    python benchmarks/speculative.py [--main qwen2.5-coder-1.5b] [--draft qwen2.5-coder-0.5b] [--draft-tokens 4]
    python benchmarks/speculative.py --dtype bf16     # bf16 compute, u8 KV cache (the 1.5B's default where the CPU has bf16)
    python benchmarks/speculative.py --lookup ../shared/data/hotpotqa/dev500.jsonl --max-tokens 160 [--dtype bf16]
        # prompt lookup; prompts: the first three questions' passages, asking for quoted evidence

Both models come from the ladder (``tandem llm get NAME --prepare``); the pair must share a tokenizer.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from typing import Any

PROMPTS = (
    "Passage: The Vistula is the longest river in Poland. It flows through Warsaw and Krakow.\n"
    "Question: Which river flows through Warsaw? Explain in two sentences.",
    "Write a JSON object with keys city and country for the capital of Poland, then one sentence about its history.",
    "Question: Who directed the film Stalker (1979), and where was he born? Answer in three sentences.",
)


def passage_prompts(dataset: str, n: int = 3) -> list[str]:
    """Reading prompts over the first ``n`` questions of ``dataset`` (a QA file with gold passages): the
    question's gold passages, then the question, asking for an answer and the sentences it rests on."""
    from tandem.corpus.loaders import load_dataset

    data = load_dataset(dataset)
    pool = {doc.id: doc for doc in data.passages}
    prompts = []
    for q in data.questions[:n]:
        passages = "\n".join(f"[{pool[i].title}] {pool[i].text}" for i in q.gold_doc_ids)
        prompts.append(f"{passages}\nQuestion: {q.text}\nAnswer it, then quote each sentence above that the "
                       "answer rests on, one a line.")
    return prompts


def generate(pipe: Any, rid: int, tokens: list[int], config: Any) -> list[int]:
    """One greedy reply of ``pipe`` (an OpenVINO GenAI continuous-batching pipeline) to ``tokens``."""
    import numpy as np
    import openvino as ov

    handle = pipe.add_request(rid, ov.Tensor(np.array([tokens], dtype=np.int64)), config)
    while pipe.has_non_finished_requests():
        pipe.step()
    return [int(t) for t in handle.read_all()[0].generated_ids]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--main", default="qwen2.5-coder-1.5b")
    parser.add_argument("--draft", default="qwen2.5-coder-0.5b")
    parser.add_argument("--draft-tokens", type=int, default=4)
    parser.add_argument("--lookup", metavar="DATASET",
                        help="prompt-lookup decoding instead of a draft model, on prompts made of this dataset's passages")
    parser.add_argument("--ngram", type=int, default=3, help="prompt lookup: the longest n-gram looked up")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", choices=("f32", "bf16"), default="f32",
                        help="compute precision of both models (bf16: KV cache u8, as the engine's bf16 default)")
    args = parser.parse_args()

    import openvino_genai as ovg

    from tandem.llm import load_llm

    helper = "lookup" if args.lookup else "draft"
    folders = {}
    # prepares each model once and gives its OpenVINO folder
    for name in (args.main,) if args.lookup else (args.main, args.draft):
        llm = load_llm(f"local:{name}", engine="openvino", num_threads=1)
        folders[name] = (llm.path, llm.tokenizer)
        llm.close()
    tokenizer = folders[args.main][1]
    texts = passage_prompts(args.lookup) if args.lookup else PROMPTS
    prompts = [tokenizer(tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                                       tokenize=False), add_special_tokens=False)["input_ids"]
               for p in texts]
    props = {"INFERENCE_NUM_THREADS": args.threads, "INFERENCE_PRECISION_HINT": args.dtype,
             "KV_CACHE_PRECISION": "f32" if args.dtype == "f32" else "u8"}
    results = {}
    for mode in ("alone", helper, "alone", helper):  # alternated: a loaded machine weighs on both alike
        scheduler = ovg.SchedulerConfig()
        scheduler.cache_size, scheduler.max_num_seqs, scheduler.max_num_batched_tokens = 2, 4, 512
        extra = {}
        if mode == "draft":
            extra["draft_model"] = ovg.draft_model(folders[args.draft][0], "CPU", **props)
        elif mode == "lookup":
            extra["prompt_lookup"] = True
        start = time.perf_counter()
        pipe = ovg.ContinuousBatchingPipeline(folders[args.main][0], scheduler, "CPU", {**props, **extra})
        load = time.perf_counter() - start
        ids = itertools.count()
        config = ovg.GenerationConfig()
        config.max_new_tokens = args.max_tokens
        if mode != "alone":
            config.num_assistant_tokens = args.draft_tokens
        if mode == "lookup":
            config.max_ngram_size = args.ngram
        generate(pipe, next(ids), prompts[0], config)  # the first request's one-off costs
        start = time.perf_counter()
        replies = [generate(pipe, next(ids), p, config) for p in prompts]
        seconds = time.perf_counter() - start
        n = sum(len(r) for r in replies)
        said = [tokenizer.decode(r, skip_special_tokens=True) for r in replies]
        same = None if mode == "alone" or "alone" not in results else said == results["alone"]
        results[mode] = said
        print(json.dumps({"mode": mode, "dtype": args.dtype, "load_s": round(load, 1), "seconds": round(seconds, 1),
                          "prompt_tokens": sum(map(len, prompts)), "tokens": n, "tok_s": round(n / seconds, 2),
                          "same_replies_as_alone": same}))


if __name__ == "__main__":
    main()
