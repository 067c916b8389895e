"""Seconds of one schema-decoded request alone on the local engine, per structured role and per grammar form.

    python benchmarks/llm_grammar.py                      # DualRAG's roles, openvino engine
    python benchmarks/llm_grammar.py --engine torch       # the same on the transformers engine
    python benchmarks/llm_grammar.py --string 380         # a {"notes": string} of maxLength 380, split and unsplit
    python benchmarks/llm_grammar.py --relaxed            # relax_strings on vs off: same replies? seconds of each

Each request runs alone (no other sequence in the batch), by default twice: the first includes compiling the
grammar, the second reuses it. Printed: seconds, completion tokens, tokens/s, and the same prompt
decoded without a schema for reference. ``--string N`` compares the grammar ``json_ebnf`` makes (long
repeats split, ``REPEAT_SPAN``) with xgrammar's own unsplit ``{1, N}`` and an unbounded string.
``uptime`` is printed first and last.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from typing import Any

PROMPT = ("Summarize for the question: Who was the director of the film that won Best Picture in 1995? "
          "Write a long detailed paragraph. Reply in JSON.")


def timed(llm: Any, req: Any) -> dict[str, Any]:
    start = time.perf_counter()
    r = llm.complete(req)
    seconds = time.perf_counter() - start
    return {"s": round(seconds, 2), "tokens": r.completion_tokens, "tok_s": round(r.completion_tokens / seconds, 1)}


RELAXED_PROMPTS = (PROMPT.replace(" Reply in JSON.", ""),
                   "Which magazine was started first, Arthur's Magazine or First for Women? Think step by step at length.",
                   "Describe the history of the Roman Empire in great detail, with many names and dates.")


def relaxed_vs_bounded(threads: int | None) -> None:
    """Each request on an engine with ``relax_strings`` on and one with it off: identical replies, seconds."""
    from tandem.llm import LLMRequest
    from tandem.llm.local import load_local
    from tandem.methods.cooprag import prompts as cooprag_prompts
    from tandem.methods.dualrag import prompts as dualrag_prompts

    fast, slow = (load_local(engine="openvino", relax_strings=on, num_threads=threads) for on in (True, False))
    for llm in (fast, slow):
        llm.complete(LLMRequest.from_prompt("Hello", max_tokens=4))
    totals = {"same": 0, "requests": 0, "relaxed_s": 0.0, "bounded_s": 0.0, "tokens": 0}
    for role in (dualrag_prompts.REASONER, dualrag_prompts.SUMMARIZER, dualrag_prompts.ENTITY_IDENTIFIER,
                 cooprag_prompts.UNROLL):
        for prompt in RELAXED_PROMPTS:
            req = LLMRequest.from_prompt(prompt, max_tokens=role.budget, json_schema=role.bounded)
            replies, seconds = [], []
            for llm in (fast, slow):
                start = time.perf_counter()
                replies.append(llm.complete(req))
                seconds.append(time.perf_counter() - start)
            same = (replies[0].text, replies[0].completion_tokens) == (replies[1].text, replies[1].completion_tokens)
            totals["same"] += same
            totals["requests"] += 1
            totals["relaxed_s"] += seconds[0]
            totals["bounded_s"] += seconds[1]
            totals["tokens"] += replies[1].completion_tokens
            print(json.dumps({"role": role.name, "same": same, "tokens": replies[1].completion_tokens,
                              "relaxed_s": round(seconds[0], 2), "bounded_s": round(seconds[1], 2)}), flush=True)
    print(json.dumps({**{k: round(v, 1) if isinstance(v, float) else v for k, v in totals.items()},
                      "continuations": fast.continuations}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", default="openvino", choices=("openvino", "torch"))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--attempts", type=int, default=2, help="requests per role or form (the first compiles)")
    parser.add_argument("--string", type=int, metavar="N", help="only: one string of maxLength N, grammar forms")
    parser.add_argument("--relaxed", action="store_true",
                        help="only: 12 requests (DualRAG reasoner / summarizer / entity_identifier, CoopRAG unroll; "
                             "3 prompts each) on two engines, relax_strings on and off")
    args = parser.parse_args()
    if args.relaxed:
        relaxed_vs_bounded(args.threads)
        return

    from tandem.llm import LLMRequest, load_llm
    from tandem.methods.dualrag import prompts as P

    print(json.dumps({"uptime_start": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}))
    llm = load_llm("local", engine=args.engine, num_threads=args.threads)
    llm.complete(LLMRequest.from_prompt("Hello", max_tokens=4))  # warm-up
    if args.string:
        import tandem.llm.ov_engine as ov_engine
        from tandem.llm.structured import json_ebnf

        n = args.string
        schema = {"type": "object", "properties": {"notes": {"type": "string", "minLength": 1, "maxLength": n}},
                  "required": ["notes"], "additionalProperties": False}
        chars = r'[^"\\\r\n]'
        forms = {"split (json_ebnf)": json_ebnf(schema),
                 f"unsplit {{1, {n}}}": f'root ::= "{{\\"notes\\":\\"" c{{1, {n}}} "\\"}}"\nc ::= {chars}\n',
                 "unbounded": f'root ::= "{{\\"notes\\":\\"" c+ "\\"}}"\nc ::= {chars}\n'}
        if args.engine != "openvino":
            raise SystemExit("--string compares grammar forms on the openvino engine")
        for name, grammar in forms.items():
            ov_engine.json_ebnf = lambda _schema, g=grammar: g  # type: ignore[assignment]
            for attempt in range(1, args.attempts + 1):
                req = LLMRequest.from_prompt(PROMPT, max_tokens=64, json_schema=schema)
                print(json.dumps({"form": name, "attempt": attempt, **timed(llm, req)}), flush=True)
    else:
        for role in P.STRUCTURED_ROLES.values():
            free = LLMRequest.from_prompt(PROMPT, max_tokens=64)
            print(json.dumps({"role": role.name, "schema": False, **timed(llm, free)}), flush=True)
            for attempt in range(1, args.attempts + 1):
                req = LLMRequest.from_prompt(PROMPT, max_tokens=role.budget, json_schema=role.bounded)
                print(json.dumps({"role": role.name, "schema": True, "attempt": attempt, **timed(llm, req)}),
                      flush=True)
    print(json.dumps({"uptime_end": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}))


if __name__ == "__main__":
    main()
