"""The answers rule of docs/faster-arithmetic.md for one engine setting on this kind of CPU, in one command.

A setting faster than the f32 path may become a default where, paired question by question against the f32
path, the 95 % bootstrap interval of its F1 minus the f32 path's has its lower end at -0.02 or above, and
the same for EM, on the first 200 dev500 questions with NativeRAG (concurrency 4) and on the first 100 with
DualRAG (concurrency 8). This runs the four arms with ``tandem eval qa`` (each resumes where it stopped:
run the same command again after a stop, a Ctrl-C or another session), then prints each half's pair
(``benchmarks/paired.py``) and the verdict, and writes it to ``ROOT/LLM/CPU/verdict-SETTING.json``
(``verdict-SETTING.HALF.json`` where ``--halves`` names one).

    python benchmarks/answers_rule.py --setting dtype=bfloat16,prompt_lookup=4       # the default model
    python benchmarks/answers_rule.py --llm local:smollm2-135m --setting prompt_lookup=4 --halves dualrag
    python benchmarks/answers_rule.py --setting prompt_lookup=4 --report              # the pairs so far, no run
    python benchmarks/answers_rule.py --setting prompt_lookup=4 --plan                # the commands, no run

Arms live in ``ROOT/LLM/CPU/METHOD/SETTING`` (``f32`` for the f32 path, ``--llm-opt dtype=float32``), CPU
being ``tandem.llm.cpus.cpu_kind()``: the rule holds per kind of CPU, so an arm started on another kind
is never paired with this one's (each run's ``config.json`` names the kind it ran on, and a mismatch stops
the command). The f32 arm of a half serves every setting's pair on that model and CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from paired import compare  # noqa: E402
from tandem.eval.runner import read_finished  # noqa: E402
from tandem.io import atomic_open  # noqa: E402
from tandem.llm.cpus import cpu_kind  # noqa: E402

DATASET = ROOT.parent / "shared" / "data" / "hotpotqa" / "dev500.jsonl"
F32 = ("dtype=float32",)
LOWEST = -0.02  # the lower end an interval may reach


class Half(NamedTuple):
    """One half of the rule: a method, how many of the first questions, how many in flight."""

    method: str
    limit: int
    concurrency: int


HALVES = {"naive_rag": Half("naive_rag", 200, 4), "dualrag": Half("dualrag", 100, 8)}


def slug(text: str) -> str:
    """A folder name for an LLM spec or a setting (``dtype=bfloat16,prompt_lookup=4`` -> ``dtype-bfloat16+prompt_lookup-4``)."""
    return re.sub(r"[^A-Za-z0-9_.+-]", "-", text.replace(",", "+")) or "default"


def run_config(run: Path) -> dict[str, Any]:
    """An arm's config.json ({} before it started); a damaged one stops the command, naming it."""
    config = run / "config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8")) if config.exists() else {}
    except json.JSONDecodeError as exc:
        raise SystemExit(f"{config}: not a run's config ({exc}); move the folder away or pass another --root") from None
    if not isinstance(data, dict):
        raise SystemExit(f"{config}: not a run's config (not an object); move the folder away or pass another --root")
    return data


def spelled(run: Path, key: str, path: Path) -> str:
    """``path`` as the arm's config.json spells it where it names the same file, else as given: an arm started
    before run configs noted their files' absolute paths resumes only under its own spelling of them (later
    arms resume under any: ``tandem.eval.runner.RESUME_PATHS``)."""
    old = run_config(run).get(key)
    return old if isinstance(old, str) and (ROOT / old).resolve() == path.resolve() else str(path)


def arm_command(half: Half, llm: str, options: tuple[str, ...], index: Path, out: Path) -> list[str]:
    """The ``tandem eval qa`` command of one arm."""
    cmd = ["tandem", "eval", "qa", "--method", half.method, "--dataset", spelled(out, "dataset", DATASET),
           "--index", spelled(out, "index", index), "--llm", llm, "--limit", str(half.limit), "--concurrency", str(half.concurrency),
           "--out", str(out)]
    for opt in options:
        cmd += ["--llm-opt", opt]
    return cmd


def finished(run: Path) -> tuple[int, int]:
    """(questions an arm has finished so far, how many of them failed): a resumed run keeps its failures,
    which leave a half incomplete until the arm runs again with ``--retry-errors``."""
    path = run / "predictions.jsonl"
    records = list(read_finished(path).values()) if path.exists() else []
    return len(records), sum(bool(r.get("error")) for r in records)


def check_cpu(run: Path, kind: str) -> None:
    """Stop where an arm's engine ran on another kind of CPU than this one (its config.json's ``cpu=``)."""
    found = re.search(r"cpu=(\w+)", (run_config(run).get("notes") or {}).get("llm_engine", ""))
    if found and found.group(1) != kind:
        raise SystemExit(f"{run / 'config.json'}: this arm ran on a '{found.group(1)}' CPU and this one is '{kind}'; "
                         "the rule pairs arms of one kind of CPU (move the folder away or pass another --root)")


def run_arm(cmd: list[str], run: Path, half: Half, retry_errors: bool = False) -> None:
    """Run (or resume) one arm until its questions are finished (with ``retry_errors``, its failed ones
    again); a stop leaves it resumable."""
    done, failed = finished(run)
    if done >= half.limit and not (retry_errors and failed):
        return
    if retry_errors:
        cmd = [*cmd, "--retry-errors"]
    print(f"\n== {half.method}, {run.name}: {done} of {half.limit} answered; running\n{shlex.join(cmd)}", flush=True)
    # every core for the engine, whatever else runs when the arm starts (the engine's own default counts idle ones)
    env = {**os.environ, "TANDEM_LLM_THREADS": os.environ.get("TANDEM_LLM_THREADS", str(os.cpu_count() or 1))}
    proc = subprocess.Popen([sys.executable, "-m", "tandem.cli", *cmd[1:]], cwd=ROOT, env=env)
    try:
        code = proc.wait()
    except KeyboardInterrupt:  # the arm got the same Ctrl-C: let it stop on its own, writing what it answered
        proc.wait()
        raise SystemExit(f"stopped: {run} keeps what it answered; run the same command again to resume") from None
    if code != 0:
        raise SystemExit(f"{run}: tandem eval qa exited with {code} (its messages above); the same command resumes")


def code_differs(a: Path, b: Path) -> list[str]:
    """The method files whose hashes differ between two arms' code.json (both arms should run the same code)."""
    files = [json.loads(p.read_text(encoding="utf-8")).get("files", {}) if p.exists() else {}
             for p in (a / "code.json", b / "code.json")]
    return sorted(k for k in set(files[0]) | set(files[1]) if files[0].get(k) != files[1].get(k))


def judge(pair: dict[str, Any], half: Half) -> dict[str, Any]:
    """A half's verdict: complete, and both lower ends at LOWEST or above."""
    holds = all(pair[m]["low"] >= LOWEST for m in ("em", "f1"))
    complete = pair["questions"] >= half.limit
    return {**pair, "complete": complete, "holds": holds and complete}


def report(results: dict[str, dict[str, Any]], setting: str, kind: str) -> str:
    """The pairs as a Markdown table, then the verdict."""
    lines = [f"setting `{setting}` against the f32 path, CPU kind `{kind}`", "",
             "| half | questions | identical | EM setting / f32 | F1 setting / f32 | EM diff [95 %] | F1 diff [95 %] | holds |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for method, r in results.items():
        if "questions" not in r:
            lines.append(f"| {method} | {r['note']} | | | | | | no |")
            continue
        em, f1 = r["em"], r["f1"]
        failed = sum(r.get("failed", {}).values())
        status = "yes" if r["holds"] else ("no" if r["complete"] else
                                           f"not yet ({failed} failed: run with --retry-errors)" if failed else "not yet")
        lines.append(f"| {method} | {r['questions']} of {HALVES[method].limit} | {r['identical']} | "
                     f"{em['a']:.3f} / {em['b']:.3f} | {f1['a']:.3f} / {f1['b']:.3f} | "
                     f"{em['diff']:+.3f} [{em['low']:+.3f}, {em['high']:+.3f}] | "
                     f"{f1['diff']:+.3f} [{f1['low']:+.3f}, {f1['high']:+.3f}] | {status} |")
        if r.get("code_differs"):
            lines.append(f"| | the arms ran other code of: {', '.join(r['code_differs'])} | | | | | | |")
    missing = [m for m in HALVES if m not in results]
    if missing:
        shown = "hold" if all(r.get("holds") for r in results.values()) else "do not hold (yet)"
        lines += ["", f"verdict: the halves shown {shown}; the rule asks for both (not shown: {', '.join(missing)})"]
    else:
        lines += ["", f"verdict: {'the rule holds' if holds(results) else 'the rule does not hold (yet)'} "
                      f"(each lower end >= {LOWEST} on every half, every half complete)"]
    return "\n".join(lines)


def holds(results: dict[str, dict[str, Any]]) -> bool:
    """The rule's verdict: every half present, complete and within the margin."""
    return set(results) == set(HALVES) and all(r.get("holds") for r in results.values())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setting", required=True, help="the engine options to try, comma-separated KEY=VALUE")
    parser.add_argument("--llm", default="local", help="the LLM spec both arms run (default: local, the ladder's default)")
    parser.add_argument("--halves", nargs="+", choices=list(HALVES), default=list(HALVES))
    parser.add_argument("--index", type=Path, default=ROOT / "runs" / "dev500",
                        help="a hybrid dev500 index with the graph extra (tandem index ... --extras graph)")
    parser.add_argument("--root", type=Path, default=ROOT / "runs" / "answers-rule")
    parser.add_argument("--retry-errors", action="store_true", help="run the arms' failed questions again")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--report", action="store_true", help="pair what the arms hold now; run nothing")
    mode.add_argument("--plan", action="store_true", help="print the arms' commands; run nothing")
    args = parser.parse_args(argv)
    options = tuple(o.strip() for o in args.setting.split(",") if o.strip())
    if not options or any("=" not in o for o in options):
        raise SystemExit(f"--setting {args.setting!r}: give KEY=VALUE options, comma-separated")
    if options == F32:
        raise SystemExit("--setting dtype=float32 is the f32 path itself; name a setting to compare with it")
    if not (args.plan or args.index.exists()):
        raise SystemExit(f"{args.index}: no such index; make it with tandem index --dataset {DATASET} "
                         f"--kind hybrid --extras graph --out {args.index}")
    kind = cpu_kind()
    base = args.root / slug(args.llm) / kind
    results: dict[str, dict[str, Any]] = {}
    for method in args.halves:
        half = HALVES[method]
        arms = {"f32": F32, slug(",".join(options)): options}
        runs = {name: base / method / name for name in arms}
        for name, opts in arms.items():
            cmd = arm_command(half, args.llm, opts, args.index, runs[name])
            if args.plan:
                print(shlex.join(cmd))
                continue
            check_cpu(runs[name], kind)
            if not args.report:
                run_arm(cmd, runs[name], half, args.retry_errors)
        if args.plan:
            continue
        if not all((r / "predictions.jsonl").exists() for r in runs.values()):
            results[method] = {"note": ", ".join(f"{name} {finished(r)[0]} of {half.limit}" if (r / "predictions.jsonl").exists()
                                                 else f"{name} not started" for name, r in runs.items())}
            continue
        names = list(arms)
        try:
            pair = compare(runs[names[1]], runs["f32"])
        except SystemExit as exc:  # paired.compare's "share no answered question"
            results[method] = {"note": str(exc)}
            continue
        results[method] = {**judge(pair, half), "failed": {name: finished(r)[1] for name, r in runs.items()},
                           "code_differs": code_differs(runs[names[1]], runs["f32"])}
    if args.plan:
        return
    text = report(results, args.setting, kind)
    print("\n" + text)
    base.mkdir(parents=True, exist_ok=True)
    part = "" if set(args.halves) == set(HALVES) else "." + "+".join(args.halves)  # a part never overwrites the whole
    out = base / f"verdict-{slug(','.join(options))}{part}.json"
    with atomic_open(out) as fh:
        json.dump({"llm": args.llm, "setting": list(options), "cpu": kind, "halves": results,
                   "holds": holds(results)}, fh, indent=1)
    print(f"written: {out}")


if __name__ == "__main__":
    main()
