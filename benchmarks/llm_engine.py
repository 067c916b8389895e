"""The embedded LLM's engines side by side, each figure as a ratio to what this machine allows.

    python benchmarks/llm_engine.py                                   # everything, 16 questions a method
    python benchmarks/llm_engine.py --questions 8 --engines openvino --methods dualrag --concurrency 8
    python benchmarks/llm_engine.py --skip-methods                    # GEMM, prefill and decode only
    python benchmarks/llm_engine.py --same-answers 50                 # NativeRAG greedy answers, torch vs openvino
    python benchmarks/llm_engine.py --same-answers 50 --ov-opt kv_cache=float32   # ... with engine options
    python benchmarks/llm_engine.py --compare RUN_TORCH RUN_OPENVINO  # the same from two existing eval runs
    python benchmarks/llm_engine.py --engines openvino --ov-variant weights=q4_1 --skip-methods  # settings side by side
    python benchmarks/llm_engine.py --op-profile                      # where one stream's decode time goes, per op type
    python benchmarks/llm_engine.py --model smollm2-135m              # another model of the ladder (default: local's)

One run, on the machine it runs on, prints JSON lines and then a Markdown table:

- the GEMM peak at the model's MLP shape (1024 x hidden . hidden x feed-forward, read from its GGUF: SmolLM2
  1024x576.576x1536, the 1.5B 1024x1536.1536x8960; torch, fp32, and bf16 where the CPU has it, the
  process's CPUs);
- prefill tokens/s (one ~1,000-token prompt) and decode tokens/s (1 and 16 streams) of each engine
  through ``LLM.complete`` - prefill as a ratio to the GEMM peak in tokens/s (bf16's, fp32's on a CPU
  without bf16),
  GEMM FLOPS / (2 x the model's parameters without its embedding and output tables: SmolLM2 106M, the 1.5B
  1.31B); decode as a ratio to the targets (100 / 500 tok/s);
- seconds per question of NativeRAG (naive_rag) / CoopRAG / DualRAG (``tandem eval qa`` on the first N questions
  of HotpotQA dev500 over a hybrid index of its pool (RaLa extras)) at concurrency 1 and 8.

Engines: ``torch`` (transformers, float32: the path before the OpenVINO engine), ``openvino`` (the
default), ``vllm`` (``tandem llm serve`` from .venv-vllm; skipped with a message when it is missing).
``uptime`` is printed first and last: figures from a busy machine are not the machine's limit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT.parent / "shared" / "data" / "hotpotqa" / "dev500.jsonl"
DECODE_TARGETS = {1: 100.0, 16: 500.0}
METHODS = ("naive_rag", "cooprag", "dualrag")
ENGINES = ("torch", "openvino", "vllm")
PASSAGE = (
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is "
    "named after the engineer Gustave Eiffel, whose company designed and built the tower from 1887 "
    "to 1889. Locally nicknamed La dame de fer, it was constructed as the centrepiece of the 1889 "
    "World's Fair, and to crown the centennial anniversary of the French Revolution. "
)


def emit(record: dict[str, Any]) -> dict[str, Any]:
    print(json.dumps(record), flush=True)
    return record


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def model_shapes(model: str) -> dict[str, Any]:
    """The ladder model's MLP shape and its parameters without the token embedding and output tables (what a
    prompt token costs: 2 FLOPs a parameter), read from its GGUF's header."""
    from gguf import GGUFReader

    from tandem.llm.ladder import gguf_path

    reader = GGUFReader(gguf_path(model))
    arch = str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8")

    def field(key: str) -> int:
        return int(reader.fields[f"{arch}.{key}"].parts[-1][0])

    params = sum(int(t.n_elements) for t in reader.tensors if t.name not in ("token_embd.weight", "output.weight"))
    return {"model": model, "hidden": field("embedding_length"), "ffn": field("feed_forward_length"),
            "params": params}


def gemm_peak(hidden: int, ffn: int, seconds: float = 2.0) -> dict[str, float]:
    """GFLOPS of torch matmul at the model's MLP shape (1024 x hidden . hidden x ffn), best of ~``seconds``
    each: fp32, and bf16 where the CPU computes it natively (OpenVINO lists ``BF16``; emulated bf16 on an
    AVX2-only CPU runs at ~1 GFLOPS, minutes for this loop, and bounds nothing an engine does there)."""
    import torch

    from tandem.llm.cpus import cpu_capabilities

    dtypes = {"fp32": torch.float32, **({"bf16": torch.bfloat16} if "BF16" in cpu_capabilities() else {})}
    out: dict[str, float] = {}
    for name, dtype in dtypes.items():
        a, b = torch.randn(1024, hidden, dtype=dtype), torch.randn(hidden, ffn, dtype=dtype)
        a @ b  # warm-up
        best, end = float("inf"), time.perf_counter() + seconds
        while time.perf_counter() < end:
            start = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - start)
        out[name] = 2 * 1024 * hidden * ffn / best / 1e9
    return out


def peak_precision(hw: dict[str, float]) -> str:
    """The GEMM figure prefill is compared with: bf16 where measured (the CPU computes it), else fp32."""
    return "bf16" if "bf16" in hw else "fp32"


def load_engine(model: str, engine: str, vllm_url: str | None, ov_opts: Sequence[str] = ()) -> Any:
    from tandem.llm import load_llm
    from tandem.llm.options import parse_pairs

    if engine == "vllm":
        return load_llm(f"openai:smollm2@{vllm_url}", max_concurrency=16, json_mode="schema")
    opts = parse_pairs(ov_opts, "--ov-opt") if engine == "openvino" else {}  # typed as --llm-opt's values
    return load_llm(f"local:{model}", engine=engine, **opts)


def token_speeds(llm: Any, repeat: int) -> dict[str, float]:
    """Prefill tok/s on ~1,000-token prompts (a fresh prefix each time: no cache hit), decode tok/s
    over 128 tokens in 1 and 16 concurrent streams."""
    from tandem.llm import LLMRequest

    llm.complete(LLMRequest.from_prompt("Hello", max_tokens=4))  # warm-up
    prefill = []
    for i in range(repeat):
        req = LLMRequest.from_prompt(f"Note {time.time_ns()}-{i}.\n" + PASSAGE * 14 + "\nWho designed the tower?",
                                     max_tokens=1)
        r = llm.complete(req)
        prefill.append(r.prompt_tokens / r.latency_s)
    prefill_tps = sorted(prefill)[len(prefill) // 2]

    def story(i: int) -> Any:
        return llm.complete(LLMRequest.from_prompt(f"Write a long story about dragon number {i} and a knight.",
                                                   max_tokens=128))

    single = story(0)
    decode1 = single.completion_tokens / max(1e-9, single.latency_s - single.prompt_tokens / prefill_tps)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=16) as pool:
        many = list(pool.map(story, range(1, 17)))
    decode16 = sum(r.completion_tokens for r in many) / (time.perf_counter() - start)
    return {"prefill_tok_s": prefill_tps, "decode1_tok_s": decode1, "decode16_tok_s": decode16,
            "prompt_tokens": float(r.prompt_tokens)}


def ensure_index(folder: Path) -> Path:
    if not (folder / "index.json").is_file() and not any(folder.glob("*")):
        # hybrid with RaLa's extras: CoopRAG reranks with RaLa, which needs the index's encoder
        subprocess.run([sys.executable, "-m", "tandem.cli", "index", "--dataset", str(DATASET), "--kind", "hybrid",
                        "--extras", "rala", "--out", str(folder)], check=True)
    return folder


def method_seconds(method: str, llm_spec: str, llm_opts: list[str], index: Path, questions: int,
                   concurrency: int) -> dict[str, Any]:
    """Wall seconds per question of ``tandem eval qa`` (process start and model load included), each
    question's own mean latency (``latency_s``: without them; at concurrency 1 the time a question takes once
    the model is loaded), the run's fallback rate and the share of its prompt tokens the engine's prefix cache
    served (``reused``; None where the backend reports none)."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "tandem.cli", "eval", "qa", "--method", method, "--dataset", str(DATASET),
               "--index", str(index), "--limit", str(questions), "--concurrency", str(concurrency),
               "--llm", llm_spec, "--out", str(Path(out) / "run")]
        for opt in llm_opts:
            cmd += ["--llm-opt", opt]
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            text = (done.stderr or done.stdout).strip()
            return {"error": " ".join(text[text.rfind("error:"):].split()) if "error:" in text else text[-500:]}
        metrics = json.loads((Path(out) / "run" / "metrics.json").read_text())
    return {"s_per_q": wall / questions, "latency_s": metrics.get("seconds_per_q"), "wall_s": wall, "em": metrics.get("em"), "f1": metrics.get("f1"),
            "fallback_rate": metrics.get("fallback_rate"), "errors": metrics.get("errors"),
            "reused": metrics.get("reused_token_share")}


def compare_runs(base: Path, new: Path) -> dict[str, Any]:
    """Greedy answers of two ``tandem eval qa`` runs over the same questions: the share identical,
    EM/F1 of each on the questions both answered, and the questions whose answers differ."""
    def read(run: Path) -> dict[str, dict[str, Any]]:
        return {r["id"]: r for r in map(json.loads, (run / "predictions.jsonl").read_text().splitlines())}

    a, b = read(base), read(new)
    ids = [i for i in a if i in b]
    if not ids:
        raise SystemExit(f"no question answered in both {base} and {new}")
    differ = [i for i in ids if a[i]["prediction"] != b[i]["prediction"]]

    def mean(run: dict[str, dict[str, Any]], key: str) -> float:
        return sum(run[i]["scores"][key] for i in ids) / len(ids)

    return {"questions": len(ids), "identical": round(1 - len(differ) / len(ids), 3),
            "em": [round(mean(a, "em"), 3), round(mean(b, "em"), 3)],
            "f1": [round(mean(a, "f1"), 3), round(mean(b, "f1"), 3)],
            "differ": [{"id": i, "question": a[i]["question"], "base": a[i]["prediction"], "new": b[i]["prediction"]}
                       for i in differ]}


def same_answers(model: str, questions: int, index: Path, out: Path, ov_opts: list[str]) -> dict[str, Any]:
    """NativeRAG on the first ``questions`` of dev500, torch (float32) then openvino with ``ov_opts``
    (``KEY=VALUE`` engine options), one question at a time. The torch run is kept in ``out`` and reused
    while it holds the same number of questions (it does not depend on the openvino options)."""
    variant = "openvino" + "".join(f"-{o.replace('=', '_')}" for o in ov_opts)
    out = out / model
    for engine, name, opts in (("torch", "torch", []), ("openvino", variant, ov_opts)):
        preds = out / name / "predictions.jsonl"
        if name == "torch" and preds.is_file() and len(preds.read_text().splitlines()) == questions:
            continue
        cmd = [sys.executable, "-m", "tandem.cli", "eval", "qa", "--method", "naive_rag", "--dataset", str(DATASET),
               "--index", str(index), "--limit", str(questions), "--llm", f"local:{model}", "--llm-opt", f"engine={engine}",
               "--out", str(out / name)]
        for opt in opts:
            cmd += ["--llm-opt", opt]
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        emit({"run": name, "wall_s": round(time.perf_counter() - start, 1), "uptime": uptime()})
    return compare_runs(out / "torch", out / variant)


def start_vllm(port: int) -> tuple[subprocess.Popen[bytes] | None, str | None]:
    if not (ROOT / ".venv-vllm" / "bin" / "python").is_file():
        emit({"engine": "vllm", "skipped": "no .venv-vllm here (bash scripts/setup_vllm.sh makes it)"})
        return None, None
    proc = subprocess.Popen([sys.executable, "-m", "tandem.cli", "llm", "serve", "--port", str(port)])
    url = f"http://127.0.0.1:{port}/v1"
    import httpx

    for _ in range(600):
        try:
            if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(1)
    proc.terminate()
    emit({"engine": "vllm", "skipped": "the server did not answer in 10 minutes"})
    return None, None


def table(rows: list[dict[str, Any]], hw: dict[str, float], shape: dict[str, Any]) -> str:
    peak = peak_precision(hw)
    peak_tps = hw[peak] * 1e9 / (2 * shape["params"])
    gemm = ", ".join(f"{name} {gflops:.0f} GFLOPS" for name, gflops in hw.items())
    lines = [f"{shape['model']}: GEMM 1024x{shape['hidden']}.{shape['hidden']}x{shape['ffn']}: {gemm} (the {peak} "
             f"figure = {peak_tps:.0f} tok/s of prefill at 2 x {shape['params'] / 1e6:.0f}M FLOPs a token)", "",
             f"| engine | prefill tok/s (x {peak} peak) | decode 1 stream tok/s (x 100) | decode 16 streams tok/s (x 500) |",
             "| --- | --- | --- | --- |"]
    for r in rows:
        if "prefill_tok_s" in r:
            lines.append(f"| {r['engine']} | {r['prefill_tok_s']:.0f} ({r['prefill_tok_s'] / peak_tps:.2f}) | "
                         f"{r['decode1_tok_s']:.1f} ({r['decode1_tok_s'] / 100:.2f}) | "
                         f"{r['decode16_tok_s']:.0f} ({r['decode16_tok_s'] / 500:.2f}) |")
    lines += ["", "| engine | method | concurrency | questions | s / question | EM | F1 | fallback rate | prompt reused |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "s_per_q" in r:
            reused = "-" if r.get("reused") is None else f"{r['reused']:.2f}"
            lines.append(f"| {r['engine']} | {r['method']} | {r['concurrency']} | {r['questions']} | "
                         f"{r['s_per_q']:.1f} | {r['em']:.3f} | {r['f1']:.3f} | {r['fallback_rate']} | {reused} |")
    return "\n".join(lines)


def op_profile(model: str, ov_opts: Sequence[str], steps: int = 100, top: int = 8) -> dict[str, Any]:
    """One decoding stream of the default export run token by token through OpenVINO's own infer request
    (the stateful model, its SDPA attention; the engine's paged pipeline runs the same matmuls) with the
    CPU plugin's per-op counters: milliseconds per token by op type and kernel, the largest first."""
    import collections

    import numpy as np
    import openvino as ov

    from tandem.llm.local import load_local
    from tandem.llm.options import parse_pairs

    llm = load_local(model, **parse_pairs(ov_opts, "--ov-opt"))
    xml, note, threads = Path(llm.path) / "openvino_model.xml", llm.engine_note, llm.threads
    llm.close()
    precision = "f32" if "dtype=float32" in note else None
    props: dict[str, Any] = {"INFERENCE_NUM_THREADS": threads, "PERF_COUNT": True}
    if precision:
        props["INFERENCE_PRECISION_HINT"] = ov.Type.f32
    if "dynamic_quantization=0" in note:
        props["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = 0
    core = ov.Core()
    model = core.read_model(xml)
    names = {i.get_any_name() for i in model.inputs}
    request = core.compile_model(model, "CPU", props).create_infer_request()

    def feed(ids: list[int], pos: int) -> dict[str, Any]:
        inputs = {"input_ids": np.array([ids], dtype=np.int64), "attention_mask": np.ones((1, pos + len(ids)), np.int64),
                  "position_ids": np.arange(pos, pos + len(ids), dtype=np.int64)[None],
                  "beam_idx": np.zeros(1, dtype=np.int32)}
        return {k: v for k, v in inputs.items() if k in names}

    request.reset_state()
    request.infer(feed(list(range(1000, 1042)), 0))  # a 42-token prompt
    per_op: collections.Counter[str] = collections.Counter()
    walls = []
    warm = steps // 5
    for step in range(steps):
        start = time.perf_counter()
        request.infer(feed([1000 + step], 42 + step))
        walls.append(time.perf_counter() - start)
        if step >= warm:
            for p in request.profiling_info:
                per_op[f"{p.node_type} ({p.exec_type})"] += p.real_time.total_seconds()
    counted = steps - warm
    total = sum(per_op.values())
    return {"engine": note, "wall_ms_per_token": round(1000 * float(np.median(walls)), 2),
            "ops_ms_per_token": round(1000 * total / counted, 2),
            "top": [{"op": k, "ms_per_token": round(1000 * v / counted, 2), "share": round(v / total, 3)}
                    for k, v in per_op.most_common(top)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="a model of the ladder (tandem llms; default: the one a plain "
                                                      "`local` runs)")
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--questions", type=int, default=16, help="dev500 questions per method run")
    parser.add_argument("--repeat", type=int, default=3, help="prefill measurements (median)")
    parser.add_argument("--index", type=Path, default=ROOT / "runs" / "bench-llm-engine-hybrid")
    parser.add_argument("--skip-methods", action="store_true")
    parser.add_argument("--skip-tokens", action="store_true")
    parser.add_argument("--vllm-port", type=int, default=8011)
    parser.add_argument("--same-answers", type=int, metavar="N", help="only: NativeRAG answers, torch vs openvino")
    parser.add_argument("--ov-opt", action="append", default=[], metavar="KEY=VALUE",
                        help="openvino engine option (kv_cache=float32, dtype=float32, weights=int4...), repeatable")
    parser.add_argument("--ov-variant", action="append", default=[], metavar="KEY=VALUE,...",
                        help="one more openvino row with these options (weights=q4_1,dtype=float32), repeatable: "
                             "settings compared in one run")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("RUN_TORCH", "RUN_OPENVINO"))
    parser.add_argument("--op-profile", action="store_true", help="only: per-op time of one decoding stream "
                                                                   "(the default engine, or --ov-opt options)")
    args = parser.parse_args()
    from tandem.llm.ladder import default_model, find

    model = find(args.model or default_model())
    if model is None:
        parser.error(f"--model {args.model}: not a model of the ladder (tandem llms lists them)")
    model = model.name
    if args.op_profile:
        print(json.dumps({"uptime": uptime(), **op_profile(model, args.ov_opt)}, indent=1))
        return
    if args.compare:
        print(json.dumps(compare_runs(*args.compare), indent=1))
        return
    if args.same_answers:
        out = ROOT / "runs" / "bench-llm-engine-answers"
        print(json.dumps(same_answers(model, args.same_answers, ensure_index(args.index), out, args.ov_opt), indent=1))
        return
    emit({"uptime_start": uptime(), "cpus": len(os.sched_getaffinity(0))})
    shape = emit(model_shapes(model))
    hw = emit({"gemm_gflops": gemm_peak(shape["hidden"], shape["ffn"])})["gemm_gflops"]
    emit({"prefill_peak_tok_s": hw[peak_precision(hw)] * 1e9 / (2 * shape["params"]), "peak": peak_precision(hw)})
    rows: list[dict[str, Any]] = []
    proc, vllm_url = start_vllm(args.vllm_port) if "vllm" in args.engines else (None, None)
    runs = [(e, e, args.ov_opt if e == "openvino" else []) for e in args.engines]
    runs += [(f"openvino [{v}]", "openvino", v.split(",")) for v in args.ov_variant]
    try:
        for label, engine, ov_opts in runs:
            if engine == "vllm" and vllm_url is None:
                continue
            if not args.skip_tokens:
                llm = load_engine(model, engine, vllm_url, ov_opts)
                rows.append(emit({"engine": label, "options": ov_opts, **token_speeds(llm, args.repeat)}))
                if hasattr(llm, "close"):
                    llm.close()
                del llm
            if args.skip_methods:
                continue
            index = ensure_index(args.index)
            # timeout: on a 2-core CPU, vLLM keeps 8 DualRAG questions' requests waiting past the 60 s default
            spec, opts = (f"openai:smollm2@{vllm_url}", ["json_mode=schema", "max_concurrency=16", "timeout=900"]) \
                if engine == "vllm" else (f"local:{model}", [f"engine={engine}", *ov_opts])
            for method in args.methods:
                for c in args.concurrency:
                    result = method_seconds(method, spec, opts, index, args.questions, c)
                    rows.append(emit({"engine": label, "method": method, "concurrency": c,
                                      "questions": args.questions, **result}))
    finally:
        if proc is not None:
            proc.terminate()
    emit({"uptime_end": uptime()})
    print()
    print(table(rows, hw, shape))


if __name__ == "__main__":
    main()
