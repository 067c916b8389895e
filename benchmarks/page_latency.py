"""The page's answer time with a real model: `tandem serve` over the demo corpus, the demo question asked on
the web page in headless Chromium (Debian's `chromium`, driven by Playwright), and the seconds from Ask
to the first trace step on the page and to the answer. Each round starts a fresh server, waits until it
has computed the method's role instructions ahead (its warm-up: DualRAG's and CoopRAG's roles; a method that
computes nothing ahead, NativeRAG, takes `--no-warm-up`, which asks at once), asks once and stops it.

    python benchmarks/page_latency.py [--llm local] [--method dualrag] [--rounds 2] [--llm-opt KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "In which city was the wife of Pierre Curie born?"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
WARM_LINE = "instructions ahead"  # the server's log line once its warm-up is done (tandem -v)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args: argparse.Namespace, port: int) -> tuple[subprocess.Popen, threading.Event, list[str]]:
    """`tandem -v serve` in a process of its own; an event set once its warm-up line is logged."""
    cmd = [sys.executable, "-m", "tandem.cli", "-v", "serve", "--index", f"demo={args.index}", "--method", args.method,
           "--llm", args.llm, "--port", str(port)] + [x for opt in args.llm_opt for x in ("--llm-opt", opt)]
    if args.no_warm_up:
        cmd.append("--no-warm-up")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    warm, lines = threading.Event(), []

    def read() -> None:
        for line in proc.stderr:
            lines.append(line.rstrip())
            if WARM_LINE in line:
                warm.set()
    threading.Thread(target=read, daemon=True).start()
    return proc, warm, lines


def wait_ready(url: str, proc: subprocess.Popen, lines: list[str], timeout: float) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if proc.poll() is not None:
            raise SystemExit("the server stopped:\n" + "\n".join(lines[-20:]))
        try:
            with urllib.request.urlopen(url + "healthz", timeout=2):
                return time.perf_counter() - start
        except OSError:
            time.sleep(0.25)
    raise SystemExit(f"the server did not answer /healthz within {timeout:.0f} s")


def ask_on_page(url: str, chromium: str, timeout_s: float) -> dict:
    """Type the question, click Ask, and time the first trace step and the answer."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(url)
        page.wait_for_function("document.querySelectorAll('#method option').length > 3")
        page.fill("#question", QUESTION)
        start = time.perf_counter()
        page.click("#go")
        page.wait_for_selector("#steps > li >> nth=0", timeout=timeout_s * 1000)
        first = time.perf_counter() - start
        page.wait_for_selector("#answer:not([hidden])", timeout=timeout_s * 1000)
        done = time.perf_counter() - start
        out = {"first_step_s": first, "answer_s": done, "answer": page.text_content("#answer-text"),
               "steps": page.locator("#steps > li").count()}
        browser.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llm", default="local")
    ap.add_argument("--llm-opt", action="append", default=[])
    ap.add_argument("--method", default="dualrag")
    ap.add_argument("--index", default="runs/demo/index", help="built from examples/demo_corpus when missing")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--no-warm-up", action="store_true")
    ap.add_argument("--warm-timeout", type=float, default=300.0, help="seconds to wait for the warm-up line")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds the page may take to answer")
    args = ap.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("Debian's chromium is not installed (apt-get install chromium)")
    if not (ROOT / args.index / "manifest.json").is_file():
        subprocess.run([sys.executable, "-m", "tandem.cli", "index", "--corpus", "examples/demo_corpus", "--kind", "hybrid",
                        "--out", args.index], cwd=ROOT, check=True)
    print("| round | server up (s) | warm-up done (s) | Ask -> first step (s) | Ask -> answer (s) | steps | answer |")
    print("|---|---|---|---|---|---|---|")
    for n in range(1, args.rounds + 1):
        port = free_port()
        proc, warm, lines = start_server(args, port)
        try:
            url = f"http://127.0.0.1:{port}/"
            up = wait_ready(url, proc, lines, timeout=600)
            start = time.perf_counter()
            if not args.no_warm_up and not warm.wait(args.warm_timeout):
                print(f"(round {n}: no warm-up line within {args.warm_timeout:.0f} s; asking anyway)", file=sys.stderr)
            warmed = up + time.perf_counter() - start
            r = ask_on_page(url, chromium, args.timeout)
            print(f"| {n} | {up:.1f} | {'-' if args.no_warm_up else f'{warmed:.1f}'} | {r['first_step_s']:.1f} | "
                  f"{r['answer_s']:.1f} | {r['steps']} | {r['answer']} |", flush=True)
        finally:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
