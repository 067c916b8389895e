"""The web page in headless Chromium (Debian's package, driven by Playwright; nothing is downloaded):
ask the demo question against a fake-LLM server, watch the trace steps stream in, see the answer."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from tandem.corpus import load_corpus
from tandem.index import build_index
from tandem.server.app import create_app
from tandem.server.engine import Engine
from tandem.testing.fake_llm import FakeLLM

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    import uvicorn

    build_index(load_corpus(ROOT / "examples" / "demo_corpus"), tmp_path / "demo", kind="bm25")
    script = iter(["Marie Curie was born in Warsaw.", "So the answer is: Warsaw."])

    def slow(req):  # IRCoT: one reasoning sentence per step, slowly enough to watch the steps arrive
        time.sleep(0.7)
        return next(script, "So the answer is: Warsaw.")

    engine = Engine({"demo": tmp_path / "demo"}, FakeLLM(default=slow), method="ircot")
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(create_app(engine), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not srv.started and time.time() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/"
    srv.should_exit = True
    thread.join(10)


def test_page_streams_the_trace_and_shows_the_answer(server, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.goto(server)
        page.wait_for_function("document.querySelectorAll('#method option').length > 3")
        assert page.input_value("#method") == "ircot" and page.input_value("#index") == "demo"
        page.fill("#question", "Where was the discoverer of polonium born?")
        page.click("#go")
        page.wait_for_selector("#steps > li >> nth=0")
        assert page.is_hidden("#answer")  # mid-trace: steps shown, no answer yet
        page.screenshot(path=str(tmp_path / "mid-trace.png"))
        page.wait_for_selector("#answer:not([hidden])", timeout=30_000)
        page.screenshot(path=str(tmp_path / "answer.png"), full_page=True)
        assert page.text_content("#answer-text") == "Warsaw"
        steps = page.locator("#steps > li")
        assert steps.count() >= 3
        assert "retrieve" in steps.nth(0).text_content().lower()
        assert "Marie Curie" in page.text_content("#steps")  # hit titles with their passages
        assert page.locator("#cited li").count() >= 1
        assert page.get_attribute("#download", "href").startswith("blob:")
        browser.close()
    assert (tmp_path / "mid-trace.png").stat().st_size > 10_000
