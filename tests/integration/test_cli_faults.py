"""Ctrl-C during a real index build (the embedded encoder): exit 130, a message, nothing half-built
(only the build's work folder of finished shards, which the same command resumes from); the signal
lands mid-encode (some shards done, not all) and the resumed build is a sound index of every passage."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import shared, sigint_default

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_ctrl_c_during_index_exits_130_and_leaves_no_index(tmp_path):
    data = shared("hotpotqa/dev500.jsonl")
    proc = subprocess.Popen([sys.executable, "-m", "tandem.cli", "index", "--dataset", str(data), "--kind", "dense",
                             "--out", str(tmp_path / "idx")], stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            preexec_fn=sigint_default)
    assert proc.stderr is not None
    for line in proc.stderr:  # the pool is loaded: encoding (about a minute) has begun
        if "pool of" in line:
            break
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()
    proc.wait(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    # no index, no temp folder, no lock file: only the resumable work folder of the encoded shards
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], [".idx.work"])
    assert "run the same command again to resume" in err


def test_ctrl_c_mid_encode_then_the_same_command_resumes_to_a_sound_index(tmp_path):
    data = tmp_path / "dev100.jsonl"  # dev500's first 100 questions: ~1,000 passages, five shards of 200
    data.write_text("".join(shared("hotpotqa/dev500.jsonl").read_text(encoding="utf-8").splitlines(True)[:100]),
                    encoding="utf-8")
    build = tmp_path / "build"
    build.mkdir()
    out = build / "idx"
    command = [sys.executable, "-m", "tandem.cli", "index", "--dataset", str(data), "--kind", "hybrid",
               "--shard-size", "200", "--out", str(out)]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=sigint_default)
    progress = build / ".idx.work" / "progress.json"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not (progress.exists() and json.loads(progress.read_text())["shards"]):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    pool = int(re.search(r"pool of (\d+) passages", err).group(1))
    finished = len(json.loads(progress.read_text())["shards"])
    assert 1 <= finished < -(-pool // 200), "the signal did not land mid-encode"
    resumed = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    assert f"indexed {pool} passages" in resumed.stdout + resumed.stderr
    verify = subprocess.run([sys.executable, "-m", "tandem.cli", "index", "verify", str(out), "--json"],
                            capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert verify.returncode == 0, verify.stderr
    assert json.loads(verify.stdout)["documents"] == pool
    assert sorted(p.name for p in build.iterdir()) == ["idx"]  # work folder gone once finished
