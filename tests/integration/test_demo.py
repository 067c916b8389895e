"""scripts/demo.sh on the embedded models: the right answer, and no third-party noise in its output."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
# lines the quiet set-up forbids: log records, Python warnings, progress bars (tqdm draws "|###| n/N")
NOISE = re.compile(r"^(WARNING|DEBUG|INFO)\b|Warning:|\d+%\|.*\|\s*\d+/\d+|\bit/s\]")


@pytest.fixture(scope="module")
def demo_output(tmp_path_factory) -> str:
    """The demo's stdout and stderr together, run as a user runs it (minus the set-up step)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    env.pop("TQDM_DISABLE", None)  # the quiet output must come from tandem itself, not this environment
    env.pop("TRANSFORMERS_VERBOSITY", None)
    res = subprocess.run(["bash", str(ROOT / "scripts" / "demo.sh"), "--no-setup"], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:]
    return res.stdout


def test_demo_answers_the_expected_city(demo_output):
    verdict = [line for line in demo_output.splitlines() if line.startswith("expected: ")]
    assert len(verdict) == 1, demo_output[-3000:]
    assert verdict[0].startswith("expected: Warsaw") and "NO MATCH" not in verdict[0], demo_output[-3000:]
    answer = re.search(r"^answer: (.*)$", demo_output, re.MULTILINE)
    assert answer is not None and "warsaw" in answer.group(1).lower()


def test_demo_shows_the_retrieved_evidence(demo_output):
    assert "passages (hybrid)" in demo_output
    assert "step 1: retrieve" in demo_output and "Marie Curie" in demo_output


def test_demo_output_has_no_warnings_debug_lines_or_progress_bars(demo_output):
    noisy = [line for line in demo_output.splitlines() if NOISE.search(line)]
    assert noisy == []
